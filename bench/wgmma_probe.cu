// wgmma_probe: the int8 wgmma issue rate alone, without TMA or mbarriers (docs/int8_gemm.md, "kWgmma"): each SM
// runs one CTA of 1-3 warpgroups that repeat groups of four k32 steps on a fixed shared-memory tile, keeping one
// group in flight (the pattern of src/int8gemm/w8a8_wgmma.cu's consumers). Prints TOPS and the fraction of the
// dense int8 peak at the clock the SM reported (4096 MAC per cycle per SM on sm_90). sm_90a only.
//
//   wgmma_probe            (no options; EXCLUDE_FROM_ALL target: ninja -C build wgmma_probe)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

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

__device__ __forceinline__ uint64_t desc128(uint32_t addr) {  // K-major, 128-byte swizzle (as the kernel)
  return (uint64_t((addr & 0x3FFFF) >> 4)) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ void ss256(uint32_t (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%"
      "30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%"
      "58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%"
      "86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%"
      "111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "%128, %129, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
        "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
        "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]),
        "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]),
        "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
        "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
        "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]),
        "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]),
        "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]),
        "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]),
        "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]),
        "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]),
        "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]),
        "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]),
        "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "l"(da), "l"(db));
}
__device__ __forceinline__ void rs256(uint32_t (&d)[128], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                      uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%"
      "30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%"
      "58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%"
      "86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%"
      "111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "{%128,%129,%130,%131}, %132, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
        "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
        "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]),
        "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]),
        "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
        "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
        "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]),
        "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]),
        "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]),
        "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]),
        "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]),
        "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]),
        "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]),
        "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]),
        "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}

// kMode 0: both operands in shared memory (SS); 1: A in registers (RS).
template <int kMode, int kWG>
__global__ void __launch_bounds__(128 * kWG, 1) probe(int iters, long long* cycles, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* s = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  for (int i = threadIdx.x; i < 48 * 1024 / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(s)[i] = i * 2654435761u;
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(s));
  const uint64_t da = desc128(base + (threadIdx.x / 128) * 8192), db = desc128(base + 16384);
  const uint32_t a0 = threadIdx.x * 3u, a1 = threadIdx.x * 5u, a2 = threadIdx.x * 7u, a3 = threadIdx.x * 11u;
  uint32_t d[128];
  for (int i = 0; i < 128; ++i) d[i] = 0;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (kMode == 0)
        ss256(d, da + 2 * kk, db + 2 * kk);
      else
        rs256(d, a0 + kk, a1, a2, a3, db + 2 * kk);
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

template <int kMode, int kWG>
bool run(const char* name, int sms) {
  const int iters = 4000;
  long long* cycles = nullptr;
  uint32_t* sink = nullptr;
  PROBE_CUDA(cudaMalloc(&cycles, sms * sizeof(long long)));
  PROBE_CUDA(cudaMalloc(&sink, size_t(sms) * 128 * kWG * 4));
  PROBE_CUDA(cudaFuncSetAttribute(probe<kMode, kWG>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  probe<kMode, kWG><<<sms, 128 * kWG, kSmem>>>(10, cycles, sink);  // warm-up
  PROBE_CUDA(cudaGetLastError());
  cudaEvent_t a, b;
  PROBE_CUDA(cudaEventCreate(&a));
  PROBE_CUDA(cudaEventCreate(&b));
  PROBE_CUDA(cudaEventRecord(a));
  probe<kMode, kWG><<<sms, 128 * kWG, kSmem>>>(iters, cycles, sink);
  PROBE_CUDA(cudaGetLastError());
  PROBE_CUDA(cudaEventRecord(b));
  PROBE_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  PROBE_CUDA(cudaEventElapsedTime(&ms, a, b));
  long long c0 = 0;
  PROBE_CUDA(cudaMemcpy(&c0, cycles, sizeof c0, cudaMemcpyDeviceToHost));
  const double macs_per_sm = double(kWG) * iters * 4 * 64.0 * 256 * 32;
  const double mhz = double(c0) / (ms * 1e3);  // SM 0's cycles over the launch's event time (a lower bound)
  std::printf(
      "%-14s %d warpgroup(s): %.2f ms, %.0f TOPS, %.1f cycles per m64n256k32 per SM (ideal 128), %.0f%% of "
      "4096 MAC/cycle/SM at >= %.0f MHz\n",
      name, kWG, ms, 2 * macs_per_sm * sms / (ms * 1e-3) / 1e12, double(c0) / (macs_per_sm / 524288.0),
      100.0 * macs_per_sm / double(c0) / 4096.0, mhz);
  PROBE_CUDA(cudaFree(cycles));
  PROBE_CUDA(cudaFree(sink));
  PROBE_CUDA(cudaEventDestroy(a));
  PROBE_CUDA(cudaEventDestroy(b));
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
  return ok ? 0 : 1;
}
