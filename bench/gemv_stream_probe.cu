// gemv_stream_probe: how fast can the weight-only GEMV's access pattern stream, without its arithmetic?
// (docs/gemm.md, "What the numbers say"). The weights of an N x K int4 matrix are 512-byte tiles, 16 rows x 64 K
// each, the tiles of one 16-row block contiguous along K (the prepacked layout); a warp streams the tiles of one
// row block and one K slice. Variants:
//   seq        every thread reads 16-byte words grid-stride (the read ceiling's pattern)
//   ring<D>    the fused kernel's per-warp shared-memory ring: one 16-byte cp.async (L2 evict-first) per lane
//              per tile, D tiles in flight, read back with one 16-byte shared load
//   ring<D>+mma  the same plus the int4 bf16 unpack and 4 mma.m16n8k16 per tile (the main loop's arithmetic,
//              without the scale flush and with B fragments held in registers)
//   reg<U>     U tiles loaded per lane straight into registers (ld.global.nc, L1 no-allocate, evict-first),
//              the next U requested before the current U are consumed
// Timing: 20 back-to-back launches between two events, over buffers rotated through > 4x L2, median of 11
// batches; GB/s = weight bytes / time per launch. With --single, as the benchmarks time a call: each launch alone
// between two events after an empty kernel (so the event floor is in every time, and a launch's ramp-up and drain
// are not overlapped by its neighbours'), median of 30; the empty kernel's own time is printed first (session 35).
//
//   gemv_stream_probe [--single]   (prints one table)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemm/fused_kernel.cuh"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {
using namespace qdec;

// The fused kernel's own copy, wait and shared-load helpers (the probe times its access pattern).
using wq::and_or;
using wq::lds128;
__device__ __forceinline__ uint64_t evict_first() {
  return wq::evict_first_policy();
}
__device__ __forceinline__ void cp16(uint32_t s, const void* g, uint64_t pol) {
  wq::cp_async16_hint(s, g, pol);
}
__device__ __forceinline__ void commit() {
  wq::cp_async_commit();
}
template <int N>
__device__ __forceinline__ void wait_group() {
  wq::cp_async_wait_group<N>();
}
__device__ __forceinline__ uint4 ldg_stream(const void* p, uint64_t pol) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(pol));
  return r;
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ptx::mma16816<true>(d, a, b0, b1);
}
// The main loop's arithmetic on one tile (int4 bf16: 4 k-steps, 128 + q by one shift + lop3 per register).
__device__ __forceinline__ void tile_math(const uint4& v, float (&acc)[4], uint32_t b0, uint32_t b1) {
  const uint32_t ws[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t w = ws[s];
    uint32_t a[4];
    a[0] = and_or(w, 0x000F000Fu, 0x43004300u);
    a[1] = and_or(w >> 4, 0x000F000Fu, 0x43004300u);
    a[2] = and_or(w >> 8, 0x000F000Fu, 0x43004300u);
    a[3] = and_or(w >> 12, 0x000F000Fu, 0x43004300u);
    mma(acc, a, b0, b1);
  }
}

struct Shape {
  int nrb, nch, splits;                                         // 16-row blocks, 512-byte tiles per row block, K slices
  __host__ __device__ int cps() const { return nch / splits; }  // tiles per warp (one slice of one row block)
};

// This lane's 16 bytes of its warp's first tile (warp = 16-row block blockIdx.x * 8 + warp, slice blockIdx.y);
// null for a warp past the last row block.
__device__ __forceinline__ const uint8_t* lane_stream(const uint8_t* w, const Shape& s) {
  const int nt = blockIdx.x * 8 + threadIdx.x / 32;
  if (nt >= s.nrb) return nullptr;
  return w + (size_t(nt) * s.nch + size_t(blockIdx.y) * s.cps()) * 512 + threadIdx.x % 32 * 16;
}

__global__ void seq_kernel(const uint4* w, size_t n, uint32_t* out) {
  uint32_t x = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(w + i), b = __ldcs(w + i + stride), c = __ldcs(w + i + 2 * stride),
                d = __ldcs(w + i + 3 * stride);
    x ^= a.x ^ a.w ^ b.y ^ b.z ^ c.x ^ c.w ^ d.y ^ d.z;
  }
  for (; i < n; i += stride) x ^= __ldcs(w + i).x;
  if (x == 0x12345678u) out[0] = x;
}

template <int D, bool MATH, int BLOCKS>
__global__ void __launch_bounds__(256, BLOCKS) ring_kernel(const uint8_t* w, Shape s, uint32_t* out) {
  __shared__ __align__(16) uint8_t ring[D * 8 * 512];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* g = lane_stream(w, s);
  if (!g) return;
  const int cps = s.cps();
  const uint64_t pol = evict_first();
  const uint32_t r0 = uint32_t(__cvta_generic_to_shared(ring)) + warp * 512 + lane * 16;
#pragma unroll
  for (int u = 0; u < D; ++u) {
    if (u < cps) cp16(r0 + u * 8 * 512, g + u * 512, pol);
    commit();
  }
  uint32_t x = 0;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t b0 = 0x3F803F80u ^ lane, b1 = 0x3F803F80u;
  for (int c0 = 0; c0 < cps; c0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      wait_group<D - 1>();
      uint4 v = make_uint4(0, 0, 0, 0);
      if (c0 + u < cps) v = lds128(r0 + u * 8 * 512);
      if (c0 + u + D < cps) cp16(r0 + u * 8 * 512, g + (c0 + u + D) * 512, pol);
      commit();
      if constexpr (MATH) {
        tile_math(v, acc, b0, b1);
      } else {
        x ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    }
  }
  if (x == 0x12345678u || acc[0] == 1.2345f) out[0] = x;
}

template <int U, int BLOCKS>
__global__ void __launch_bounds__(256, BLOCKS) reg_kernel(const uint8_t* w, Shape s, uint32_t* out) {
  const uint8_t* g = lane_stream(w, s);
  if (!g) return;
  const int cps = s.cps();
  const uint64_t pol = evict_first();
  uint4 cur[U];
#pragma unroll
  for (int u = 0; u < U; ++u) cur[u] = u < cps ? ldg_stream(g + u * 512, pol) : make_uint4(0, 0, 0, 0);
  uint32_t x = 0;
  for (int c0 = 0; c0 < cps; c0 += U) {
    uint4 nxt[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      nxt[u] = c0 + U + u < cps ? ldg_stream(g + (c0 + U + u) * 512, pol) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) x ^= cur[u].x ^ cur[u].y ^ cur[u].z ^ cur[u].w;
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = nxt[u];
  }
  if (x == 0x12345678u) out[0] = x;
}

struct Bufs {
  std::vector<uint8_t*> p;
  size_t bytes;
};

__global__ void empty_kernel() {}

bool g_single = false;  // --single

template <class F>
double time_us(F&& launch, int nbuf) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch(i % nbuf);
  std::vector<double> t;
  for (int it = 0; g_single && it < 30; ++it) {
    empty_kernel<<<1, 1>>>();
    CK(cudaEventRecord(a));
    launch(it % nbuf);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0);
  }
  for (int it = 0; !g_single && it < 11; ++it) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < 20; ++i) launch((it * 20 + i) % nbuf);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0 / 20);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--single") {
      g_single = true;
    } else {
      std::fprintf(stderr, "usage: gemv_stream_probe [--single]\n");
      return 1;
    }
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d MB, %s launches\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
              g_single ? "single (event floor included)" : "20 back-to-back");
  const size_t max_bytes = size_t(28672) * 4096 / 2;
  const int nbuf = 6;
  std::vector<uint8_t*> bufs(nbuf);
  for (auto& b : bufs) {
    CK(cudaMalloc(&b, max_bytes));
    CK(cudaMemset(b, 0x5a, max_bytes));
  }
  uint32_t* out = nullptr;
  CK(cudaMalloc(&out, 64));
  if (g_single) std::printf("empty kernel (event floor) %.2f us\n", time_us([](int) { empty_kernel<<<1, 1>>>(); }, 1));
  {
    const size_t n = max_bytes / 16;
    const int grid = prop.multiProcessorCount * 4;
    const double us = time_us([&](int i) { seq_kernel<<<grid, 512>>>((const uint4*)bufs[i], n, out); }, nbuf);
    std::printf("%-26s %-12s %8.2f us %7.0f GB/s\n", "seq (read ceiling)", "58.7 MB", us, max_bytes / us / 1e3);
  }
  struct Case {
    const char* name;
    int n, k, splits;
  };
  const Case cases[] = {{"28672x4096 s1", 28672, 4096, 1}, {"28672x4096 s2", 28672, 4096, 2},
                        {"28672x4096 s4", 28672, 4096, 4}, {"4096x14336 s16", 4096, 14336, 16},
                        {"4096x14336 s4", 4096, 14336, 4}, {"8192x8192 s8", 8192, 8192, 8},
                        {"8192x8192 s4", 8192, 8192, 4}};
  for (const Case& c : cases) {
    Shape s{c.n / 16, c.k / 64, c.splits};
    const size_t bytes = size_t(c.n) * c.k / 2;
    const dim3 grid((s.nrb + 7) / 8, c.splits);
    // ctas: resident CTAs per SM, enforced by padding the dynamic shared memory.
    auto row = [&](const char* v, auto kern, int ctas) {
      cudaFuncAttributes fa{};
      CK(cudaFuncGetAttributes(&fa, kern));
      const int dyn = std::max(0, int(prop.sharedMemPerMultiprocessor) / ctas - 1024 - int(fa.sharedSizeBytes) - 64);
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
      int occ = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 256, dyn));
      const double us = time_us([&](int i) { kern<<<grid, 256, dyn>>>(bufs[i], s, out); }, nbuf);
      std::printf("%-16s %-12s %d CTA/SM (regs %3d) grid %4dx%-3d %8.2f us %7.0f GB/s\n", c.name, v, occ, fa.numRegs,
                  grid.x, grid.y, us, bytes / us / 1e3);
    };
    for (int ctas : {4, 8}) {
      row("ring2", ring_kernel<2, false, 4>, ctas);
      row("ring4", ring_kernel<4, false, 4>, ctas);
      row("ring8", ring_kernel<8, false, 4>, ctas);
      row("ring4+mma", ring_kernel<4, true, 4>, ctas);
      row("ring8+mma", ring_kernel<8, true, 4>, ctas);
      row("reg2", reg_kernel<2, 4>, ctas);
      row("reg4", reg_kernel<4, 4>, ctas);
      row("reg8", reg_kernel<8, 4>, ctas);
    }
  }
  for (auto& b : bufs) cudaFree(b);
  cudaFree(out);
  return 0;
}
