// W8A8 per output channel on Hopper's warpgroup tensor cores (sm_90a): the kWgmma backend of qdec/w8a8_gemm.h.
//
//   Y[M, N] = (fp32(acc) * s_x[m]) * s_w[n] (+ bias[n]),  acc = Xq[M, K] . Wq[N, K]^T in int32 (channel_epilogue)
//
// Tiles of 128 (M) x 128 (N) (or x 160 where those take fewer rounds of the SMs, e.g. N = 1280 at M = 4096:
// wgmma_plan), K in steps of 128 bytes through a kStages-deep shared-memory ring filled by TMA
// (cp.async.bulk.tensor, 128-byte swizzle) and drained by wgmma.m64n128k32.s32.s8.s8 with both operands read from
// shared memory (K-major, the layout X and W have in memory). 3 warpgroups: warpgroup 0's first thread issues the
// copies (full / empty mbarrier pairs per stage); warpgroups 1 and 2 are consumers that take the CTA's tiles in
// turn ("ping-pong"): each computes a whole tile (two m64n128 halves, 128 int32 accumulators per thread) and
// applies the epilogue from its registers while the other one's wgmma runs. For long K with one or two tiles per SM
// the plan takes session 5's cooperative kernel instead (both consumers on one 128 x 256 tile, 64 rows each,
// wgmma.m64n256k32; w8a8_wgmma_coop_kernel below). Persistent: at most one CTA per SM walks the (tile, split)
// units. K and N tails come from TMA's zero fill of out-of-bounds boxes, M's from a box of the last row block's
// rows (produce); the epilogue stores only rows < M and columns < N. Split-K (few tiles, long K) sums int32 partials
// through the workspace, exactly.
//
// Measured on the H200 and not kept (docs/int8_gemm.md, session 17): the cooperative kernel everywhere (up to 1.38x
// the ping-pong kernel's time, e.g. 6144 x 4096 at M = 1024; faster only in the case the plan gives it), the
// ping-pong kernel without setmaxnreg (spilled; slower than session 5's on 10 of 21 cells), clusters of 2 CTAs
// sharing W by TMA multicast (session 5: no faster; session 17 on this kernel: 3-8% slower), 4, 5 and 7 stages (7:
// no static shared memory, the scales after the ring; no faster than 6 at M >= 1024, 2-8% slower below),
// 64-byte K steps with 8 stages (20% slower), one CTA per tile with the epilogue staged through shared memory.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "int8gemm/w8a8_common.cuh"
#include "int8gemm/w8a8_wgmma.h"
#include "int8gemm/wgmma_s8.cuh"
#include "qdec/workspace.h"
#include "runtime/cuda_check.h"
#include "runtime/ptx.cuh"

// The device helpers of this file serve the sm_90a kernels alone. A device pass for another architecture (the optional
// sm_80 build) compiles the kernels' bodies away, and nvcc would warn that each helper is unreferenced (#177).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

namespace qdec::w8a8 {
namespace {

// CTA tile per consumer warpgroup 128 (M) x 128 (N); K step kBK = 128 bytes: the row of a box is one 128-byte
// swizzle span. (64-byte steps with 8 stages, so that more loads are in flight, measured 20% slower on the H200.)
constexpr int kBM = 128, kBN = 128, kBK = 128;
#ifndef QDEC_W8A8_WGMMA_STAGES
#define QDEC_W8A8_WGMMA_STAGES 6
#endif
constexpr int kStages = QDEC_W8A8_WGMMA_STAGES;
#ifndef QDEC_W8A8_WGMMA_SETMAXNREG
#define QDEC_W8A8_WGMMA_SETMAXNREG 1
#endif
constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK, kStageBytes = kABytes + kBBytes;
constexpr int kThreadsWg = 384;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + alignment slack (the ring starts 1024-byte aligned)
// The ping-pong kernel's wide tiles: 128 x 160 (wgmma.m64n160k32, 160 accumulators per consumer thread), for N where
// they take fewer rounds of the SMs than 128 x 128 tiles (wgmma_plan; e.g. N = 1280 at M = 4096: 256 tiles in 2 rounds
// against 320 in 3). Same ring depth; 216 KiB of stages.
constexpr int kWideBN = 160;
constexpr int kWideStageBytes = kABytes + kWideBN * kBK;
constexpr int kWideSmemBytes = kStages * kWideStageBytes + 1024;
static_assert(kWideStageBytes % 1024 == 0, "stages of 128-byte swizzled boxes start 1024-byte aligned");

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Named barrier 1 + c: the 128 threads of consumer warpgroup c alone (the other consumer is elsewhere in its tile).
__device__ __forceinline__ void consumer_bar(int c) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
}
// Mainloop order of the two consumers (named barriers 3 and 4, 256 threads): consumer c waits on 3 + c until the
// other one has issued the whole mainloop of the unit before c's, which signals it with bar.arrive. So a consumer
// never waits on a stage's full barrier more than one phase ahead of the producer (a parity wait would pass on the
// older phase and read a stage that was never filled), and the two mainloops do not share the tensor pipe.
__device__ __forceinline__ void order_wait(int c) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(3 + c) : "memory");
}
__device__ __forceinline__ void order_signal(int c) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - c) : "memory");
}

// Build-time knobs (defaults measured on the H200, docs/int8_gemm.md, session 17): the TMA boxes' L2 promotion (the
// size of the L2 fetch a box row triggers; a row is 128 bytes: 256-byte promotion was 2.5-3% slower over 21 cells,
// up to 13% at 4096 x 4096 x 4096; none and 128 bytes measured alike) and kGroupM (4, 8 and 16 within 1-2%).
#ifndef QDEC_W8A8_WGMMA_L2_PROMOTION
#define QDEC_W8A8_WGMMA_L2_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#endif
// QDEC_W8A8_WGMMA_FORCE_COOP=1 (variant builds only): the cooperative kernel for every unsplit-capable plan (H100,
// session 19: 16% slower over 21 cells, faster only at 4096 x 4096 x 4096 and 28672 x 4096 x 1024).
#ifndef QDEC_W8A8_WGMMA_FORCE_COOP
#define QDEC_W8A8_WGMMA_FORCE_COOP 0
#endif
// QDEC_W8A8_WGMMA_WIDE=0 (variant builds only): never plan the 128 x 160 tiles.
#ifndef QDEC_W8A8_WGMMA_WIDE
#define QDEC_W8A8_WGMMA_WIDE 1
#endif
#ifndef QDEC_W8A8_WGMMA_GROUP_M
#define QDEC_W8A8_WGMMA_GROUP_M 8
#endif
// Output tile order: groups of kGroupM row blocks, row blocks fastest within a group, so that the CTAs working at
// the same time share a few row blocks of X and a few column blocks of W in L2.
constexpr int kGroupM = QDEC_W8A8_WGMMA_GROUP_M;
__device__ __forceinline__ void raster(int tile, int tiles_m, int tiles_n, int* mb, int* nb) {
  const int per_group = kGroupM * tiles_n;
  const int group = tile / per_group, first_m = group * kGroupM;
  const int gm = min(kGroupM, tiles_m - first_m), in = tile - group * per_group;
  *mb = first_m + in % gm;
  *nb = in / gm;
}

template <int kY>
__device__ __forceinline__ void store2(void* y, size_t i, float v0, float v1) {
  if constexpr (kY == 0) {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(y) + i) = __floats2bfloat162_rn(v0, v1);
  } else if constexpr (kY == 1) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(y) + i) = __floats2half2_rn(v0, v1);
  } else {
    *reinterpret_cast<float2*>(static_cast<float*>(y) + i) = make_float2(v0, v1);
  }
}

// Split-K partials: a (tile, split) unit's 128 consumer threads x 128 int32, stored as 32 int4 per thread,
// chunk j of thread t at j * 128 + t (a warp's store is 512 contiguous bytes).
constexpr int kPartialChunks = 32 * 128;

// k-steps of unit u (the last split of a tile may be shorter; >= 1 by the host plan).
__device__ __forceinline__ int unit_ksteps(int u, const WgmmaArgs& a) {
  const int kt0 = (u % a.splits) * a.kt_per_split;
  return min(a.nk, kt0 + a.kt_per_split) - kt0;
}

// Epilogue of 64 rows of a tile from the m64n(8 kJ) accumulators of a warpgroup: warp w holds rows
// 16w + lane / 4 (+ 8) (rt0 is that row in the tile); register 4j + i holds column 8j + 2 (lane % 4) + (i & 1), the
// row + 8 for i >= 2 (PTX ISA, wgmma D fragment layout). Same arithmetic as channel_epilogue: (fp32(acc) * s_x) *
// s_w, then + bias, each rounded once. sx_s / sw_s / bias_s: the tile's scales and bias by row / column in the tile.
template <int kY, int kJ>
__device__ __forceinline__ void store_rows(const uint32_t (&d)[4 * kJ], const WgmmaArgs& a, int rt0, int m0, int n0,
                                           const float* sx_s, const float* sw_s, const float* bias_s) {
  const int lane = threadIdx.x % 32, ct0 = 2 * (lane % 4);
  const bool has_bias = a.bias != nullptr;
#pragma unroll
  for (int r8 = 0; r8 < 2; ++r8) {
    const int rt = rt0 + 8 * r8, row = m0 + rt;
    if (row >= a.m) continue;
    const float sx = sx_s[rt];
    const size_t base = size_t(row) * size_t(a.ldy);
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int ct = ct0 + 8 * j, col = n0 + ct;
      if (col >= a.n) break;
      const int acc0 = int(d[4 * j + 2 * r8]), acc1 = int(d[4 * j + 2 * r8 + 1]);
      float v0 = __fmul_rn(__fmul_rn(__int2float_rn(acc0), sx), sw_s[ct]);
      float v1 = __fmul_rn(__fmul_rn(__int2float_rn(acc1), sx), sw_s[ct + 1]);
      if (has_bias) {
        v0 = __fadd_rn(v0, bias_s[ct]);
        v1 = __fadd_rn(v1, bias_s[ct + 1]);
      }
      if (a.vec_y && col + 1 < a.n) {
        store2<kY>(a.y, base + col, v0, v1);
      } else {
        store_y(a.y, a.ldy, kY, row, col, v0);
        if (col + 1 < a.n) store_y(a.y, a.ldy, kY, row, col + 1, v1);
      }
      if (a.acc) {
        a.acc[size_t(row) * a.n + col] = acc0;
        if (col + 1 < a.n) a.acc[size_t(row) * a.n + col + 1] = acc1;
      }
    }
  }
}

// A thread's split-K partial: its accumulators as kChunks int4, chunk j at dst / src + j * kStride (the consumer
// threads' chunks interleaved: a warp's access is 512 contiguous bytes). store_partial writes, add_partial adds.
template <int kChunks, int kStride>
__device__ __forceinline__ void store_partial(const uint32_t (&d)[4 * kChunks], int4* dst) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j)
    __stcg(dst + j * kStride, make_int4(int(d[4 * j]), int(d[4 * j + 1]), int(d[4 * j + 2]), int(d[4 * j + 3])));
}
template <int kChunks, int kStride>
__device__ __forceinline__ void add_partial(uint32_t (&d)[4 * kChunks], const int4* src) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int4 o = __ldcg(src + j * kStride);
    d[4 * j] += uint32_t(o.x);
    d[4 * j + 1] += uint32_t(o.y);
    d[4 * j + 2] += uint32_t(o.z);
    d[4 * j + 3] += uint32_t(o.w);
  }
}

// Thread 0 initializes every stage's full barrier (one arrival: the producer's expect_tx) and empty barrier
// (`releases` arrivals: the consumer warpgroups that read the stage).
__device__ __forceinline__ void init_ring_barriers(uint64_t* full_bar, uint64_t* empty_bar, int stages, int releases) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(smem_u32(&full_bar[s]), 1);
      mbar_init(smem_u32(&empty_bar[s]), releases);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

// The producer (thread 0 of warpgroup 0): the TMA copies of the CTA's units, in unit order, into a ring of
// kRing stages (X box of 128 rows, then W box of kRowsW rows), each completing on its stage's full barrier once the
// consumers have released the stage's previous round (its empty barrier). The last row block of an M that is not a
// multiple of 128 takes its X through map_x_tail, a box of its M % 128 rows: a box reaching past M (zero-filled by
// the TMA) made W8A8 at M = 192 1.27-1.35x slower than at M = 256 on the large shapes (H200, session 25). The
// stage's rows past M then keep stale bytes, whose products land in accumulator rows that are never stored.
template <int kRing, int kRowsW>
__device__ __forceinline__ void produce(const CUtensorMap* map_x, const CUtensorMap* map_x_tail,
                                        const CUtensorMap* map_w, const WgmmaArgs& a, uint32_t ring_s,
                                        uint64_t* full_bar, uint64_t* empty_bar) {
  constexpr int kBytesX = kBM * kBK, kBytesW = kRowsW * kBK, kBytes = kBytesX + kBytesW;
  const int units = a.tiles_m * a.tiles_n * a.splits, m_tail = a.m % kBM;
  int g = 0;  // k-steps issued by this CTA so far (all units): stage g % kRing, round g / kRing
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    int mb, nb;
    raster(u / a.splits, a.tiles_m, a.tiles_n, &mb, &nb);
    const int kt0 = (u % a.splits) * a.kt_per_split, nkt = unit_ksteps(u, a);
    const bool tail = m_tail != 0 && mb == a.tiles_m - 1;
    const CUtensorMap* mx = tail ? map_x_tail : map_x;
    const int bytes = (tail ? m_tail * kBK : kBytesX) + kBytesW;
    for (int i = 0; i < nkt; ++i, ++g) {
      const int s = g % kRing, round = g / kRing;
      if (round > 0) mbar_wait(smem_u32(&empty_bar[s]), (round - 1) & 1);
      const uint32_t full = smem_u32(&full_bar[s]);
      mbar_expect_tx(full, bytes);
      const uint32_t stage = ring_s + s * kBytes;
      tma_load_2d(stage, mx, (kt0 + i) * kBK, mb * kBM, full);
      tma_load_2d(stage + kBytesX, map_w, (kt0 + i) * kBK, nb * kRowsW, full);
    }
  }
}

// Persistent ping-pong: the grid is at most one CTA per SM, each walking units (tile, split) with a stride of the
// grid; its units alternate between the two consumer warpgroups, each of which computes a whole 128 x 128 tile
// (two m64n128 halves) and stores it, so that one consumer's epilogue runs under the other's wgmma. The producer
// fills the ring in unit order and both consumers take their stages in that order, so the ring's stage and phase
// run on across units and consumers.
template <int kY, int kTileN>
__global__ void __launch_bounds__(kThreadsWg, 1)
    w8a8_wgmma_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_x_tail,
                      const __grid_constant__ CUtensorMap map_w, const WgmmaArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(kTileN == kBN || kTileN == kWideBN, "tile widths: 128 and 160");
  constexpr int kTileStageBytes = kABytes + kTileN * kBK;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages], empty_bar[kStages];
  __shared__ int is_last[2];
  __shared__ float sw_s[2][kTileN], bias_s[2][kTileN], sx_s[2][kBM];
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t ring_s = smem_u32(ring);
  const int tid = threadIdx.x, wg = tid / 128;
  const int units = a.tiles_m * a.tiles_n * a.splits;
  init_ring_barriers(full_bar, empty_bar, kStages, 1);  // a stage is read by the consumer of its unit alone

#if QDEC_W8A8_WGMMA_SETMAXNREG
  // Registers: the producer warpgroup gives most of its share to the consumers (40 + 2 x 232 of 3 x 168 per thread).
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  }
#endif
  if (wg == 0) {  // producer: one thread issues every copy
    if (tid == 0) produce<kStages, kTileN>(&map_x, &map_x_tail, &map_w, a, ring_s, full_bar, empty_bar);
  } else {
    const int c = wg - 1;  // consumer c takes the CTA's units 2j + c
    const int t = tid - 128 * wg, lane = tid % 32, w = t / 32;
    int g = 0;                                // k-steps of the CTA's units before this one (both consumers')
    uint32_t d0[kTileN / 2], d1[kTileN / 2];  // rows 0..63 and 64..127 of the tile
    auto release = [&](int step) { mbar_arrive(smem_u32(&empty_bar[step % kStages])); };
    int local = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x, ++local) {
      const int nkt = unit_ksteps(u, a);
      if ((local & 1) != c) {
        g += nkt;
        continue;
      }
      // The tile's scales and bias, loaded now (this thread's column and row) so that their latency is not on the
      // epilogue's path; they go to shared memory after the mainloop.
      const int split = u % a.splits;
      int mb, nb;
      raster(u / a.splits, a.tiles_m, a.tiles_n, &mb, &nb);
      const int m0 = mb * kBM, n0 = nb * kTileN;
      const float sw_t = n0 + t < a.n ? a.w_scale[n0 + t] : 0.0f;
      const float bias_t = a.bias && n0 + t < a.n ? a.bias[n0 + t] : 0.0f;
      const float sx_t = m0 + t < a.m ? a.x_scale[m0 + t] : 0.0f;
      // Wide tiles: threads t < kTileN - 128 also take column 128 + t.
      float sw_t2 = 0.0f, bias_t2 = 0.0f;
      if constexpr (kTileN > kBN) {
        const int c2 = n0 + kBN + t;
        if (kBN + t < kTileN && c2 < a.n) {
          sw_t2 = a.w_scale[c2];
          bias_t2 = a.bias ? a.bias[c2] : 0.0f;
        }
      }
      if (local > 0) order_wait(c);  // unit local - 1 is the other consumer's
      for (int i = 0; i < nkt; ++i, ++g) {
        const int s = g % kStages;
        mbar_wait(smem_u32(&full_bar[s]), (g / kStages) & 1);
        const uint32_t stage = ring_s + s * kTileStageBytes;
        const uint64_t da0 = sw128_desc(stage), da1 = sw128_desc(stage + 64 * kBK), db = sw128_desc(stage + kABytes);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk) {  // 32 bytes of K per instruction: +2 in the descriptor's address field
          if constexpr (kTileN == kBN) {
            wgmma_m64n128k32_s8(d0, da0 + 2 * kk, db + 2 * kk, i > 0 || kk > 0);  // the unit's first step overwrites d
            wgmma_m64n128k32_s8(d1, da1 + 2 * kk, db + 2 * kk, i > 0 || kk > 0);
          } else {
            wgmma_m64n160k32_s8(d0, da0 + 2 * kk, db + 2 * kk, i > 0 || kk > 0);
            wgmma_m64n160k32_s8(d1, da1 + 2 * kk, db + 2 * kk, i > 0 || kk > 0);
          }
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // Keep this step's group in flight; the previous one is complete now, so its stage goes back to the producer.
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (i > 0 && t == 0) release(g - 1);
      }
      if (u + int(gridDim.x) < units) order_signal(c);  // the next unit, the other consumer's, may start
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      if (t == 0) release(g - 1);  // the unit's last stage

      // Split-K: every split stores its partial; the last split of the tile to arrive (a counter) adds the others'
      // partials to its registers and applies the epilogue, then re-arms the counter.
      const int tile = mb * a.tiles_n + nb;
      if constexpr (kTileN == kBN) {  // wide tiles are planned unsplit
        if (a.splits > 1) {
          int4* mine = a.partials + (size_t(tile) * a.splits + split) * kPartialChunks + t;
          store_partial<16, 128>(d0, mine);
          store_partial<16, 128>(d1, mine + 16 * 128);
          const bool last =
              ptx::split_arrive(a.counters + tile, a.splits, t == 0, &is_last[c], [c] { consumer_bar(c); });
          consumer_bar(c);  // is_last[c] is read by all before thread 0 may set it for the next unit
          if (!last) continue;
          if (t == 0) a.counters[tile] = 0;
          for (int s = 0; s < a.splits; ++s) {
            if (s == split) continue;
            const int4* other = a.partials + (size_t(tile) * a.splits + s) * kPartialChunks + t;
            add_partial<16, 128>(d0, other);
            add_partial<16, 128>(d1, other + 16 * 128);
          }
        }
      }

      // The tile's scales and bias pass through shared memory: read from global memory inside the store loop, every
      // load would wait behind the stores before it (Y may alias them as far as the compiler knows).
      consumer_bar(c);  // every thread of this consumer is done with its previous tile's epilogue
      sw_s[c][t] = sw_t;
      bias_s[c][t] = bias_t;
      sx_s[c][t] = sx_t;
      if constexpr (kTileN > kBN) {
        if (kBN + t < kTileN) {
          sw_s[c][kBN + t] = sw_t2;
          bias_s[c][kBN + t] = bias_t2;
        }
      }
      consumer_bar(c);
      const int rt0 = w * 16 + lane / 4;
      store_rows<kY, kTileN / 8>(d0, a, rt0, m0, n0, sx_s[c], sw_s[c], bias_s[c]);
      store_rows<kY, kTileN / 8>(d1, a, 64 + rt0, m0, n0, sx_s[c], sw_s[c], bias_s[c]);
    }
  }  // consumers
#endif
}

// ---- The cooperative kernel (session 5's): both consumers on one 128 x 256 tile, for long-K problems that give
// each consumer of the ping-pong kernel only one or two tiles (wgmma_plan's rule): there the ping-pong overlap buys
// little, and a 128 x 256 step reads fewer shared-memory bytes per MAC (0.031 against 0.039 B, TMA writes included).
constexpr int kCoopBN = 256, kCoopStages = 4;
constexpr int kCoopABytes = kBM * kBK, kCoopStageBytes = kCoopABytes + kCoopBN * kBK;
constexpr int kCoopSmemBytes = kCoopStages * kCoopStageBytes + 1024;

// Named barrier 1: the two consumer warpgroups (256 threads; the producer warpgroup does not take part).
__device__ __forceinline__ void coop_consumers_bar() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// Split-K partials: a (tile, split) unit's 256 consumer threads x 128 int32, stored as 32 int4 per thread,
// chunk j of thread t at j * 256 + t (a warp's store is 512 contiguous bytes).
constexpr int kCoopPartialChunks = 32 * 256;

// Persistent: the grid is at most one CTA per SM, each walking units (tile, split) with a stride of the grid; the
// ring's stage and phase run on across units, so the producer loads the next unit while the consumers are in the
// epilogue of the current one. The epilogue stores straight from the accumulator registers (only the tile's scales
// and bias pass through shared memory).
template <int kY>
__global__ void __launch_bounds__(kThreadsWg, 1)
    w8a8_wgmma_coop_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_x_tail,
                           const __grid_constant__ CUtensorMap map_w, const WgmmaArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kCoopStages], empty_bar[kCoopStages];
  __shared__ int is_last;
  __shared__ float sw_s[kCoopBN], bias_s[kCoopBN], sx_s[kBM];
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t ring_s = smem_u32(ring);
  const int tid = threadIdx.x, wg = tid / 128;
  const int units = a.tiles_m * a.tiles_n * a.splits;
  init_ring_barriers(full_bar, empty_bar, kCoopStages, 2);  // both consumers read every stage

  if (wg == 0) {  // producer: one thread issues every copy
    if (tid == 0) produce<kCoopStages, kCoopBN>(&map_x, &map_x_tail, &map_w, a, ring_s, full_bar, empty_bar);
    return;
  }

  const int c = wg - 1;  // consumer: rows 64c .. 64c + 63 of the tile
  const int t = tid - 128, lane = tid % 32, w = t % 128 / 32;
  int g = 0;
  uint32_t d[128];
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int split = u % a.splits, tile = u / a.splits;
    int mb, nb;
    raster(tile, a.tiles_m, a.tiles_n, &mb, &nb);
    const int nkt = unit_ksteps(u, a);
    for (int i = 0; i < nkt; ++i, ++g) {
      const int s = g % kCoopStages;
      mbar_wait(smem_u32(&full_bar[s]), (g / kCoopStages) & 1);
      const uint32_t stage = ring_s + s * kCoopStageBytes;
      const uint64_t da = sw128_desc(stage + c * 64 * kBK), db = sw128_desc(stage + kCoopABytes);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk)  // 32 bytes of K per instruction: +2 in the descriptor's address field
        wgmma_m64n256k32_s8(d, da + 2 * kk, db + 2 * kk, i > 0 || kk > 0);  // the unit's first step overwrites d
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      // Keep this step's group in flight; the previous one is complete now, so its stage goes back to the producer.
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      if (i > 0 && t % 128 == 0) mbar_arrive(smem_u32(&empty_bar[(g - 1) % kCoopStages]));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (t % 128 == 0) mbar_arrive(smem_u32(&empty_bar[(g - 1) % kCoopStages]));  // the unit's last stage

    // Split-K: every split stores its partial; the last split of the tile to arrive (a counter) adds the others'
    // partials to its registers and applies the epilogue, then re-arms the counter.
    if (a.splits > 1) {
      store_partial<32, 256>(d, a.partials + size_t(u) * kCoopPartialChunks + t);
      const bool last = ptx::split_arrive(a.counters + tile, a.splits, t == 0, &is_last, [] { coop_consumers_bar(); });
      coop_consumers_bar();  // is_last is read by all before thread 0 may set it for the next unit
      if (!last) continue;
      if (t == 0) a.counters[tile] = 0;
      for (int s = 0; s < a.splits; ++s) {
        if (s == split) continue;
        add_partial<32, 256>(d, a.partials + (size_t(tile) * a.splits + s) * kCoopPartialChunks + t);
      }
    }

    // The tile's scales and bias go to shared memory first: read from global memory inside the store loop, every
    // load would wait behind the stores before it (Y may alias them as far as the compiler knows).
    const int m0 = mb * kBM, n0 = nb * kCoopBN;
    coop_consumers_bar();  // every consumer is done with the previous unit's epilogue
    sw_s[t] = n0 + t < a.n ? a.w_scale[n0 + t] : 0.0f;
    bias_s[t] = a.bias && n0 + t < a.n ? a.bias[n0 + t] : 0.0f;
    if (t < kBM) sx_s[t] = m0 + t < a.m ? a.x_scale[m0 + t] : 0.0f;
    coop_consumers_bar();

    // Epilogue from registers: this consumer's 64 rows of the 128 x 256 tile.
    store_rows<kY, 32>(d, a, c * 64 + w * 16 + lane / 4, m0, n0, sx_s, sw_s, bias_s);
  }
#endif
}

using Kernel = void (*)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const WgmmaArgs);
// Dispatch list: one instantiation per output dtype (GemmDType order: bf16, fp16, fp32).
constexpr Kernel kKernels[3] = {w8a8_wgmma_kernel<0, kBN>, w8a8_wgmma_kernel<1, kBN>, w8a8_wgmma_kernel<2, kBN>};
constexpr Kernel kWideKernels[3] = {w8a8_wgmma_kernel<0, kWideBN>, w8a8_wgmma_kernel<1, kWideBN>,
                                    w8a8_wgmma_kernel<2, kWideBN>};
constexpr Kernel kCoopKernels[3] = {w8a8_wgmma_coop_kernel<0>, w8a8_wgmma_coop_kernel<1>, w8a8_wgmma_coop_kernel<2>};

// The kernels' dynamic shared memory limit, set once per process and device (the attribute is per device); after
// that a launch pays one cudaGetDevice and an atomic load.
Status set_smem_attributes() {
  static std::mutex mu;
  static std::atomic<uint64_t> done{0};  // bit per device ordinal < 64
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu);
  for (Kernel f : kKernels)
    QDEC_CUDA_RETURN(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  for (Kernel f : kWideKernels)
    QDEC_CUDA_RETURN(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kWideSmemBytes));
  for (Kernel f : kCoopKernels)
    QDEC_CUDA_RETURN(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kCoopSmemBytes));
  done.fetch_or(bit, std::memory_order_release);
  return Status::Ok();
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Status encode_tiled(EncodeTiled* out) {
  static std::mutex mu;
  static EncodeTiled fn = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    QDEC_CUDA_RETURN(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p)
      return Status(StatusCode::kUnsupported, "the driver has no cuTensorMapEncodeTiled");
    fn = reinterpret_cast<EncodeTiled>(p);
  }
  *out = fn;
  return Status::Ok();
}

}  // namespace

Status tensor_map_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, unsigned long long dim0,
                     unsigned long long dim1, unsigned long long stride_bytes, int box0, int box1,
                     CUtensorMapSwizzle swizzle, const char* what) {
  EncodeTiled enc = nullptr;
  QDEC_RETURN_IF_ERROR(encode_tiled(&enc));
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(dim0), static_cast<cuuint64_t>(dim1)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box0), static_cast<cuuint32_t>(box1)};
  const cuuint32_t estride[2] = {1, 1};
  const CUresult r =
      enc(map, type, 2, const_cast<void*>(base), dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
          QDEC_W8A8_WGMMA_L2_PROMOTION, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status(StatusCode::kCudaError, std::string("cuTensorMapEncodeTiled(") + what + ", [" + std::to_string(dim1) +
                                              ", " + std::to_string(dim0) + "], ld " + std::to_string(stride_bytes) +
                                              ") failed with CUresult " + std::to_string(int(r)));
  return Status::Ok();
}

Status int8_tensor_map(CUtensorMap* map, const int8_t* base, int rows, int k, long long ld, int box_k, int box_rows,
                       CUtensorMapSwizzle swizzle, const char* what) {
  return tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, static_cast<unsigned long long>(k),
                       static_cast<unsigned long long>(rows), static_cast<unsigned long long>(ld), box_k, box_rows,
                       swizzle, what);
}

Status wgmma_supported() {
  return sm90a_kernel_status<w8a8_wgmma_kernel<0, kBN>>("w8a8 wgmma backend");
}

Status wgmma_plan(int m, int n, int k, int num_splits, WgmmaPlan* pl) {
  DeviceInfo dev;
  QDEC_RETURN_IF_ERROR(current_device_info(&dev));
  pl->tiles_m = (m + kBM - 1) / kBM;
  pl->nk = (k + kBK - 1) / kBK;
  // The cooperative kernel where the ping-pong kernel's consumers would get one or two long tiles each: K >= 8192,
  // 0.9-2 of its 128 x 256 tiles per SM, its rounds no emptier than the ping-pong kernel's, and the automatic split
  // count (H200, docs/int8_gemm.md, session 17: 4096 x 14336 and 8192 x 8192 at M = 1024 6-10% faster; 1280 x 8192
  // at M = 4096, 160 tiles in 2 rounds against 320 in 3, 25% slower; every other shape at M = 1024 and 4096 faster
  // with the ping-pong kernel).
  const long long sms = dev.sm_count;
  const long long coop_tiles = static_cast<long long>(pl->tiles_m) * ((n + kCoopBN - 1) / kCoopBN);
  const long long pp_tiles = static_cast<long long>(pl->tiles_m) * ((n + kBN - 1) / kBN);
  const long long coop_rounds = (coop_tiles + sms - 1) / sms, pp_rounds = (pp_tiles + sms - 1) / sms;
  pl->coop = QDEC_W8A8_WGMMA_FORCE_COOP
                 ? num_splits == 0
                 : num_splits == 0 && pl->nk >= 64 && 10 * coop_tiles >= 9 * sms && coop_tiles <= 2 * sms &&
                       coop_tiles * pp_rounds >= pp_tiles * coop_rounds;  // tiles per round: coop's >= the ping-pong's
  // Wide tiles (128 x 160) where the 128 x 128 tiles take more than one round and the wide ones cost at most 0.9x
  // their rounds x width (the busiest SM's MACs): e.g. N = 1280 at M = 4096, 2 rounds of 256 tiles against 3 of 320.
  // Unsplit: the rule needs more 128 x 128 tiles than SMs, where the split search below keeps one split anyway.
  const long long wide_tiles = static_cast<long long>(pl->tiles_m) * ((n + kWideBN - 1) / kWideBN);
  const long long wide_rounds = (wide_tiles + sms - 1) / sms;
  pl->bn = kBN;
  if (QDEC_W8A8_WGMMA_WIDE && !pl->coop && num_splits == 0 && pp_tiles > sms &&
      10 * wide_rounds * kWideBN <= 9 * pp_rounds * kBN)
    pl->bn = kWideBN;
  pl->tiles_n = pl->coop ? (n + kCoopBN - 1) / kCoopBN : (n + pl->bn - 1) / pl->bn;
  const long long chunks = pl->coop ? kCoopPartialChunks : kPartialChunks;
  const long long tiles = static_cast<long long>(pl->tiles_m) * pl->tiles_n;
  int splits = num_splits;
  if (splits == 0 && pl->bn == kWideBN) splits = 1;  // the wide kernel has no split-K path (wgmma_launch relies on it)
  if (splits == 0) {
    // Estimated time in k-steps (one 128 x 128 x 128 step): rounds of units over the SMs x (k-steps per split + ~4
    // for the epilogue and the first loads + ~12 per round for a split's partial: its 64 KiB store, the fence, and
    // the last split's reads; the constants come from session 5's 128 x 256 kernel, where splitting 192 tiles of
    // K = 4096 in two ran 72 us against 59 us for cuBLASLt). Splits only while every one keeps >= 4 k-steps and the
    // partials stay below 64 MiB.
    splits = 1;
    double best = 1e300;
    for (int s = 1; s <= 4; ++s) {
      const int kps = (pl->nk + s - 1) / s;
      if (s > 1 && (kps < 4 || tiles * s * chunks * 16 > (64ll << 20))) break;
      const long long rounds = (tiles * s + sms - 1) / sms;
      const double cost = double(rounds) * (kps + 4 + (s > 1 ? 12 : 0));
      if (cost < best) best = cost, splits = s;
    }
  }
  splits = std::min(std::max(splits, 1), pl->nk);
  pl->kt_per_split = (pl->nk + splits - 1) / splits;
  pl->splits = (pl->nk + pl->kt_per_split - 1) / pl->kt_per_split;  // every split has >= 1 k-step
  if (tiles * pl->splits > 0x7fffffffll)
    return Status(StatusCode::kInvalidArgument, "w8a8 wgmma: " + std::to_string(tiles) + " tiles x " +
                                                    std::to_string(pl->splits) + " splits exceed 2^31 units");
  // Workspace (qdec/workspace.h): the tile counters in the state zone; the per-split partials, written before they
  // are read, after it.
  if (pl->splits > 1 && (size_t(tiles) * 4 + 255) / 256 * 256 > kWorkspaceStateBytes) {
    if (num_splits > 1)
      return Status(StatusCode::kInvalidArgument, "w8a8 wgmma: num_splits " + std::to_string(num_splits) + " needs " +
                                                      std::to_string(tiles) +
                                                      " tile counters, more than the workspace's state zone holds");
    pl->splits = 1;
    pl->kt_per_split = pl->nk;
  }
  pl->grid = static_cast<int>(std::min<long long>(tiles * pl->splits, dev.sm_count));
  pl->ws_bytes = 0;
  if (pl->splits > 1) {
    pl->counters_bytes = (size_t(tiles) * 4 + 255) / 256 * 256;
    pl->ws_bytes = kWorkspaceStateBytes + size_t(tiles) * pl->splits * size_t(chunks) * 16;
  }
  return Status::Ok();
}

Status wgmma_launch(const WgmmaArgs& args, const WgmmaPlan& pl, const int8_t* xq, long long ldq, const int8_t* wq,
                    long long ldw, void* workspace, cudaStream_t stream) {
  QDEC_RETURN_IF_ERROR(wgmma_supported());
  if (args.y_dtype < 0 || args.y_dtype > 2)
    return Status(StatusCode::kInvalidArgument, "w8a8 wgmma: y dtype " + std::to_string(args.y_dtype));
  CUtensorMap mx{}, mx_tail{}, mw{};
  QDEC_RETURN_IF_ERROR(int8_tensor_map(&mx, xq, args.m, args.k, ldq, kBK, kBM, CU_TENSOR_MAP_SWIZZLE_128B, "w8a8 x"));
  mx_tail = mx;
  if (args.m % kBM != 0)
    QDEC_RETURN_IF_ERROR(int8_tensor_map(&mx_tail, xq, args.m, args.k, ldq, kBK, args.m % kBM,
                                         CU_TENSOR_MAP_SWIZZLE_128B, "w8a8 x tail"));
  QDEC_RETURN_IF_ERROR(int8_tensor_map(&mw, wq, args.n, args.k, ldw, kBK, pl.coop ? kCoopBN : pl.bn,
                                       CU_TENSOR_MAP_SWIZZLE_128B, "w8a8 w"));
  WgmmaArgs a = args;
  a.tiles_m = pl.tiles_m;
  a.tiles_n = pl.tiles_n;
  a.nk = pl.nk;
  a.splits = pl.splits;
  a.kt_per_split = pl.kt_per_split;
  a.counters = nullptr;
  a.partials = nullptr;
  if (pl.splits > 1) {
    a.counters = static_cast<int*>(workspace);
    a.partials = reinterpret_cast<int4*>(static_cast<char*>(workspace) + kWorkspaceStateBytes);
  }
  const size_t esize = a.y_dtype == 2 ? 4 : 2;
  a.vec_y = a.ldy % 2 == 0 && reinterpret_cast<uintptr_t>(a.y) % (2 * esize) == 0;  // column pairs
  QDEC_RETURN_IF_ERROR(set_smem_attributes());
  if (pl.coop) {
    kCoopKernels[a.y_dtype]<<<pl.grid, kThreadsWg, kCoopSmemBytes, stream>>>(mx, mx_tail, mw, a);
  } else if (pl.bn == kWideBN) {
    kWideKernels[a.y_dtype]<<<pl.grid, kThreadsWg, kWideSmemBytes, stream>>>(mx, mx_tail, mw, a);
  } else {
    kKernels[a.y_dtype]<<<pl.grid, kThreadsWg, kSmemBytes, stream>>>(mx, mx_tail, mw, a);
  }
  return cuda_status(cudaGetLastError(), "w8a8 wgmma kernel launch");
}

}  // namespace qdec::w8a8
