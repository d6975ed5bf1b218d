// wgmma_probe: the int8 wgmma issue rate alone, without TMA or mbarriers (docs/int8_gemm.md, "kWgmma"): each SM
// runs one CTA of 1-3 warpgroups that repeat groups of four k32 steps on a fixed shared-memory tile, keeping one
// group in flight (the pattern of src/int8gemm/w8a8_wgmma.cu's consumers); then the W4A8 wgmma kernel's pattern
// (probe_w4a8: A from rewritten registers, two k-steps per group, B with or without swizzle). Prints TOPS and the
// fraction of the dense int8 peak at the clock the SM reported (4096 MAC per cycle per SM on sm_90). sm_90a only.
//
//   wgmma_probe            (no options; EXCLUDE_FROM_ALL target: ninja -C build wgmma_probe)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "int8gemm/wgmma_s8.cuh"

namespace {

#define PROBE_CUDA(x)                                                                          \
  do {                                                                                         \
    const cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return false;                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kSmem = 50 * 1024;

// 48 KB of 1024-byte-aligned shared memory filled with a fixed pattern; returns its shared address.
__device__ __forceinline__ uint32_t filled_tile() {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* s = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  for (int i = threadIdx.x; i < 48 * 1024 / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(s)[i] = i * 2654435761u;
  __syncthreads();
  return static_cast<uint32_t>(__cvta_generic_to_shared(s));
}

// kMode 0: both operands in shared memory (SS); 1: A in registers (RS).
template <int kMode, int kWG>
__global__ void __launch_bounds__(128 * kWG, 1) probe(int iters, long long* cycles, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t base = filled_tile();
  const uint64_t da = qdec::w8a8::sw128_desc(base + (threadIdx.x / 128) * 8192),
                 db = qdec::w8a8::sw128_desc(base + 16384);
  const uint32_t a0 = threadIdx.x * 3u, a1 = threadIdx.x * 5u, a2 = threadIdx.x * 7u, a3 = threadIdx.x * 11u;
  uint32_t d[128];
  for (int i = 0; i < 128; ++i) d[i] = 0;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (kMode == 0)
        qdec::w8a8::wgmma_m64n256k32_s8(d, da + 2 * kk, db + 2 * kk, 1);
      else
        qdec::w8a8::wgmma_m64n256k32_s8_rs(d, a0 + kk, a1, a2, a3, db + 2 * kk, 1);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const long long t1 = clock64();
  uint32_t x = 0;
  for (int i = 0; i < 128; ++i) x ^= d[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;  // keeps the math alive
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

// The W4A8 kernel's pattern (src/int8gemm/w4a8_wgmma.cu): A from registers rewritten before every group of two k32
// steps (two register sets in turn, as the dequantization does), B = kN tokens from shared memory, one group in
// flight; B K-major without swizzle (the kernel's layout: 8 x 16-byte core matrices, LBO 128, SBO 512) or with the
// 128-byte swizzle. kRewrite false keeps the A registers fixed (no dependency for wgmma.fence to wait on).
template <int kN, bool kInterleave, bool kRewrite, int kWG>
__global__ void __launch_bounds__(128 * kWG, 1) probe_w4a8(int iters, long long* cycles, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t base = filled_tile();
  // Four tiles of kN x 64 bytes in turn (the kernel's X ring).
  constexpr uint32_t kTile = kN * 64;
  auto desc = [&](int tile, int ks) {
    return kInterleave ? qdec::w8a8::interleave_desc(base + (tile * kTile) % 32768 + ks * 256, 128, 512)
                       : qdec::w8a8::sw128_desc(base) + 2 * ks;  // one tile: kN rows x 128 bytes fit
  };
  uint32_t a[2][2][4];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int r = 0; r < 4; ++r) a[i][j][r] = threadIdx.x * (3u + i + 2 * j + 5 * r);
  uint32_t d[kN / 2];
  for (int i = 0; i < kN / 2; ++i) d[i] = 0;
  auto mma = [&](const uint32_t(&aa)[2][4], int tile) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      if constexpr (kN == 128)
        qdec::w8a8::wgmma_m64n128k32_s8_rs(d, aa[ks][0], aa[ks][1], aa[ks][2], aa[ks][3], desc(tile, ks), 1);
      else
        qdec::w8a8::wgmma_m64n256k32_s8_rs(d, aa[ks][0], aa[ks][1], aa[ks][2], aa[ks][3], desc(tile, ks), 1);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };
  auto rewrite = [&](uint32_t(&aa)[2][4]) {
    if constexpr (kRewrite)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) aa[j][r] = aa[j][r] * 0x01010101u + 0x80808080u;
  };
  const long long t0 = clock64();
  for (int it = 0; it < iters; it += 2) {
    mma(a[0], it & 3);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    rewrite(a[1]);
    mma(a[1], (it + 1) & 3);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    rewrite(a[0]);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const long long t1 = clock64();
  uint32_t x = 0;
  for (int i = 0; i < kN / 2; ++i) x ^= d[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

using ProbeKernel = void (*)(int, long long*, uint32_t*);

// One warm-up launch and one timed launch of `kern` on every SM (threads per CTA, iters); *ms the event time, *cycles
// SM 0's clock64 span.
bool time_probe(ProbeKernel kern, int sms, int threads, int iters, float* ms, long long* cycles) {
  long long* d_cycles = nullptr;
  uint32_t* sink = nullptr;
  PROBE_CUDA(cudaMalloc(&d_cycles, sms * sizeof(long long)));
  PROBE_CUDA(cudaMalloc(&sink, size_t(sms) * threads * 4));
  PROBE_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kern<<<sms, threads, kSmem>>>(10, d_cycles, sink);  // warm-up
  PROBE_CUDA(cudaGetLastError());
  cudaEvent_t a, b;
  PROBE_CUDA(cudaEventCreate(&a));
  PROBE_CUDA(cudaEventCreate(&b));
  PROBE_CUDA(cudaEventRecord(a));
  kern<<<sms, threads, kSmem>>>(iters, d_cycles, sink);
  PROBE_CUDA(cudaGetLastError());
  PROBE_CUDA(cudaEventRecord(b));
  PROBE_CUDA(cudaEventSynchronize(b));
  PROBE_CUDA(cudaEventElapsedTime(ms, a, b));
  PROBE_CUDA(cudaMemcpy(cycles, d_cycles, sizeof *cycles, cudaMemcpyDeviceToHost));
  PROBE_CUDA(cudaFree(d_cycles));
  PROBE_CUDA(cudaFree(sink));
  PROBE_CUDA(cudaEventDestroy(a));
  PROBE_CUDA(cudaEventDestroy(b));
  return true;
}

template <int kN, bool kInterleave, bool kRewrite, int kWG>
bool run_w4a8(int sms) {
  const int iters = 8000;
  float ms = 0;
  long long c0 = 0;
  if (!time_probe(probe_w4a8<kN, kInterleave, kRewrite, kWG>, sms, 128 * kWG, iters, &ms, &c0)) return false;
  const double macs_per_sm = double(kWG) * iters * 2 * 64.0 * kN * 32;
  std::printf("RS n%d %-10s A %-9s %d warpgroup(s): %.3f ms, %.0f TOPS, %.0f%% of 4096 MAC/cycle/SM\n", kN,
              kInterleave ? "interleave" : "sw128", kRewrite ? "rewritten" : "fixed", kWG, ms,
              2 * macs_per_sm * sms / (ms * 1e-3) / 1e12, 100.0 * macs_per_sm / double(c0) / 4096.0);
  return true;
}

template <int kMode, int kWG>
bool run(const char* name, int sms) {
  const int iters = 4000;
  float ms = 0;
  long long c0 = 0;
  if (!time_probe(probe<kMode, kWG>, sms, 128 * kWG, iters, &ms, &c0)) return false;
  const double macs_per_sm = double(kWG) * iters * 4 * 64.0 * 256 * 32;
  const double mhz = double(c0) / (ms * 1e3);  // SM 0's cycles over the launch's event time (a lower bound)
  std::printf(
      "%-14s %d warpgroup(s): %.2f ms, %.0f TOPS, %.1f cycles per m64n256k32 per SM (ideal 128), %.0f%% of "
      "4096 MAC/cycle/SM at >= %.0f MHz\n",
      name, kWG, ms, 2 * macs_per_sm * sms / (ms * 1e-3) / 1e12, double(c0) / (macs_per_sm / 524288.0),
      100.0 * macs_per_sm / double(c0) / 4096.0, mhz);
  return true;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("wgmma_probe: no CUDA device\n");
    return 2;
  }
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("wgmma_probe: needs an sm_90 device (this one is sm_%d%d)\n", prop.major, prop.minor);
    return 2;
  }
  std::printf("wgmma_probe on %s (%d SMs): wgmma.m64n256k32.s32.s8.s8, groups of 4, one group in flight\n", prop.name,
              prop.multiProcessorCount);
  const int sms = prop.multiProcessorCount;
  const bool ok = run<0, 1>("SS", sms) && run<0, 2>("SS", sms) && run<0, 3>("SS", sms) && run<1, 1>("RS", sms) &&
                  run<1, 2>("RS", sms);
  const bool ok2 =
      run_w4a8<128, true, true, 2>(sms) && run_w4a8<128, true, true, 4>(sms) && run_w4a8<128, true, false, 4>(sms) &&
      run_w4a8<128, false, true, 4>(sms) && run_w4a8<128, false, false, 4>(sms) && run_w4a8<256, true, true, 2>(sms) &&
      run_w4a8<256, true, false, 2>(sms) && run_w4a8<256, false, true, 2>(sms) && run_w4a8<256, false, false, 2>(sms);
  return ok && ok2 ? 0 : 1;
}
