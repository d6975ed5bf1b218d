// W4A8 GEMM on Hopper's warpgroup tensor cores (sm_90a): W4A8Path::kWgmma64 / 128 / 256 (docs/int8_w4a8.md).
//
//   Y^T[N, M] = W8[N, K] . Xq[M, K]^T with wgmma.m64nNk32.s32.s8.s8, N = the token tile (64, 128 or 256)
//
// Design
// - The weights are the register A operand: warp w of a warpgroup owns one 16-channel block of the prepacked
//   layout (w4a8_layout.h), whose 16 bytes per lane and 64-K tile are, after the in-register UINT4 -> INT8
//   dequantization (dequant4, the mma kernel's), exactly its A fragments of the tile's two k-steps: wgmma's per-warp
//   A fragment is mma.m16n8k32's. No shuffles, and the weights never pass through the tensor core's shared-memory
//   reads.
// - The prepack keeps K in its natural order (a lane's 16 bytes are its A fragments at their K positions), so X is
//   read as the caller stores it: one TMA box per (token tile, 64-K tile) of a tensor map over X [M, ldq], kTok rows
//   of 64 bytes in the 64-byte swizzle (the last token tile's box stops at M), which is wgmma's K-major
//   64-byte-swizzle layout (8-row groups 512 bytes apart; k-step s starts 32 bytes into the rows). Until session 22 the
//   prepack permuted K inside the tile and a first kernel wrote X in the same order into the workspace
//   (docs/int8_w4a8.md).
// - CTA = 2 warpgroups = 128 channels (8 blocks) x kTok tokens. Copies by the TMA engine (cp.async.bulk) on
//   mbarriers, no block barrier in the loop: each warp streams its own weight block through its own ring (runs of
//   kWT tiles, kDWS runs deep); X, read by both warpgroups, through a ring of kXSlots tiles with full and empty
//   barriers, or, where the grid has at most one CTA per SM, through one ring of kXSlots / 2 tiles per warpgroup
//   (kOwnX: no empty barriers, and the warpgroups never wait on each other; session 24). Per tile a warpgroup waits
//   for its X, issues its two wgmma, waits for the previous tile's (one group stays queued in the tensor pipe),
//   releases (or, kOwnX, refills) that tile's X slot and dequantizes the next tile.
// - Measured on the H200 and replaced (docs/int8_w4a8.md, "How it got there" and session 13): X gathered by 4-byte
//   cp.async into shared memory (L1 82% busy); per-thread 16-byte cp.async for W and X at any ring depth (the
//   weights streamed at ~1.3-1.7 TB/s); a producer warp (lost occupancy); one block barrier per tile (146 warp
//   instructions per warp and tile, session 12); a slot refilled by whichever warpgroup releases it second (an
//   acquire-release shared-memory atomic: MEMBAR.ALL.CTA, 1-12% slower). Now (ncu, wg128, M = 128): ~108 warp
//   instructions per warp and tile, the tensor pipe ~40% busy; each warpgroup's tile is a ~1000-cycle dependent
//   chain (X wait, issue, previous-group wait, shared loads, dequantization) for 128 tensor cycles.
// - int32 until the epilogue, so split-K partials add exactly, in any order: the same epilogue arithmetic as the mma
//   kernel (w4a8_kernel.cuh), hence the same output bits as the kTokens paths. Split-K (session 21): where the K splits
//   of a tile fit the SMs as one thread block cluster (2-8 CTAs), each CTA leaves its partial in its shared memory
//   and adds the cluster's partials of its share of the tile's tokens through distributed shared memory, then stores
//   that share; otherwise, as the mma kernel, partials in the workspace and the last CTA of the tile by ticket adds
//   them. The cluster form took 5-25% off split grids at M = 64-256 (docs/int8_w4a8.md, session 21).
#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>
#include <vector>

#include "int8gemm/w4a8_kernel.cuh"
#include "int8gemm/w4a8_layout.h"
#include "int8gemm/w4a8_wgmma.h"
#include "int8gemm/w8a8_wgmma.h"
#include "int8gemm/wgmma_s8.cuh"
#include "runtime/cuda_check.h"

// The device helpers of this file serve the sm_90a kernel alone. A device pass for another architecture (the optional
// sm_80 build) compiles the kernel's body away, and nvcc would warn that each helper is unreferenced (#177).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

namespace qdec::w4a8 {
namespace {

// A grid of at most one CTA per SM takes kOneCtaSmemBytes of shared memory, so that two CTAs never share an SM. It
// came with session 20's programmatic launch behind the permute kernel (whose early CTAs otherwise paired up on the
// SMs that kernel left first); the split planner's cluster capacities were measured with it, so it stays, and since
// session 24 the wg64 / wg128 grids that fit the SMs give each warpgroup its own X ring, which wants the SM alone.
// QDEC_W4A8_WGMMA_CLUSTER (build knob, 1; 0 for A/B variant builds): a split-K grid of 2 to kMaxClusterSplits splits
// is launched as clusters of its splits, which add their partials through distributed shared memory instead of the
// workspace and a ticket (docs/int8_w4a8.md, session 21), where the clusters fit the SMs in as few rounds as the CTAs.
#ifndef QDEC_W4A8_WGMMA_CLUSTER
#define QDEC_W4A8_WGMMA_CLUSTER 1
#endif
constexpr bool kClusterSplitK = QDEC_W4A8_WGMMA_CLUSTER != 0;
constexpr int kMaxClusterSplits = 8;  // the portable cluster size
// Dynamic shared memory that keeps a second CTA off the SM (2 x (116 + 1) KiB > 228 KiB).
constexpr int kOneCtaSmemBytes = 116 * 1024;

// QDEC_W4A8_TIMELINE (probe builds only, default 0): every CTA of the GEMM kernel records %globaltimer at its phase
// boundaries into g_timeline[cta][kTlSlots], for the timeline probe (bench/w4a8_timeline.cu). Off, the stamps compile
// to nothing.
#ifndef QDEC_W4A8_TIMELINE
#define QDEC_W4A8_TIMELINE 0
#endif
#if QDEC_W4A8_TIMELINE
constexpr int kTlSlots = 10, kTlCtas = 4096;
__device__ unsigned long long g_timeline[kTlCtas * kTlSlots];
#endif
__device__ __forceinline__ void tl_stamp(int slot, bool cond) {
#if QDEC_W4A8_TIMELINE
  if (!cond) return;
  const int cta = blockIdx.x + gridDim.x * blockIdx.z;
  if (cta >= kTlCtas) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (slot == 1) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    t = smid;
  }
  g_timeline[cta * kTlSlots + slot] = t;
#else
  (void)slot;
  (void)cond;
#endif
}

constexpr int kCtaChannels = kCtaBlocks * kTileN;  // 128

template <int kTok_>
struct WgConfig {
  static constexpr int kTok = kTok_;
  static constexpr int kXBytes = kTok * kTileK;  // an X tile: kTok rows of 64 bytes (64-byte swizzle)
  // Weights: every warp streams its own 16-channel block through its own ring, in runs of kWT 64-K tiles (one bulk
  // copy of the codes and one of the run's group meta per run), kDWS runs ahead, each run slot with its own "full"
  // mbarrier: no other warp takes part. One 512-byte copy per tile cost ~181 warp instructions per warp and tile
  // (ncu, 28672 x 4096, M = 16, 2.1 issued per cycle); runs of 4: ~146 (with the block barrier, since removed).
  static constexpr int kWT = 4;
  static constexpr int kRunMetaBytes = 2 * kWT * kMetaBytes;  // at most 8 groups of 32 per run (group size 32)
  static constexpr int kWRunBytes = kWT * kTileBytes + kRunMetaBytes;
  static constexpr int kDWS = kTok == 128 ? 2 : 4;  // wg128: two CTAs per SM in 227 KB with the X ring
  static constexpr int kWWarpBytes = kDWS * kWRunBytes;
  // X: kXSlots tiles shared by both warpgroups (full and empty mbarriers per slot): tile j in the tensor pipe, up to
  // j + kXSlots - 1 in flight behind it. With kOwnX (the kernel's parameter) the same slots and full barriers form
  // two rings of kXSlots / 2, one per warpgroup, and the empty barriers go unused.
  static constexpr int kXSlots = 8;
  static constexpr int kWOffset = kXSlots * kXBytes;
  static constexpr int kBarOffset = kWOffset + kWarps * kWWarpBytes;
  // Barriers: [kWarps][kDWS] W full, [kXSlots] X full, [kXSlots] X empty.
  static constexpr int kBarBytes = (kWarps * kDWS + 2 * kXSlots) * 8;
  // The epilogue's operands, copied (cp.async) when the CTA starts so that their loads are not on the path from the
  // main loop's end to the stores: per token s_x (float) and the row sum (int32, qoq-c); per channel of the CTA's 128
  // the bias (float), the fp16 scale and the qoq-c zero (byte).
  static constexpr int kOpOffset = (kBarOffset + kBarBytes + 15) / 16 * 16;
  static constexpr int kOpSx = kOpOffset, kOpRsum = kOpSx + 4 * kTok, kOpBias = kOpRsum + 4 * kTok;
  static constexpr int kOpScale = kOpBias + 4 * kCtaChannels, kOpZero = kOpScale + 2 * kCtaChannels;
  static constexpr int kSmemBytes = kOpZero + kCtaChannels;
  // In a split-K cluster the X ring holds the CTA's int32 partial ([chunk][thread] int4, kTok x 512 bytes), which the
  // cluster's other CTAs read, so each warp's output staging (kTok x 32 bytes) goes to the weight rings; otherwise to
  // the X ring.
  static constexpr int kStageOffset = kWOffset;
  static_assert(kStageOffset + kWarps * kTok * 32 <= kBarOffset, "the output staging fits in the weight rings");
  static_assert(kTok * 512 <= kWOffset, "the CTA's partial fits in the X ring");
  static constexpr int kMinBlocks = kTok >= 256 ? 1 : 2;
  static_assert(kXSlots % kWT == 0 && kXSlots % 2 == 0,
                "the main loop is unrolled over a lap of the X ring: whole runs");
  static_assert(kXBytes % 256 == 0 && kWRunBytes % 256 == 0, "slots stay 256-byte aligned");
  static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "kMinBlocks CTAs fit an SM's shared memory");
};

template <int kTok>
__device__ __forceinline__ void wgmma_rs(uint32_t (&d)[kTok / 2], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (kTok == 64) {
    w8a8::wgmma_m64n64k32_s8_rs(d, a[0], a[1], a[2], a[3], db, 1);
  } else if constexpr (kTok == 128) {
    w8a8::wgmma_m64n128k32_s8_rs(d, a[0], a[1], a[2], a[3], db, 1);
  } else {
    w8a8::wgmma_m64n256k32_s8_rs(d, a[0], a[1], a[2], a[3], db, 1);
  }
}

// Keeps the compiler from moving reads or writes of the accumulators across the asynchronous wgmma.
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// ---- Bulk copies (the TMA engine); the mbarriers are wgmma_s8.cuh's ----------------------------------------------
using w8a8::mbar_arrive;
using w8a8::mbar_expect_tx;
using w8a8::mbar_init;
using w8a8::mbar_wait;
// bytes (a multiple of 16) from global to shared memory, completing on bar.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, int bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// Orders this thread's earlier generic-proxy accesses of shared memory (and, after a barrier, the CTA's) before its
// later async-proxy ones (bulk copies overwriting a slot that was read by loads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- Thread block clusters (the split-K reduction through distributed shared memory) ----------------------------
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(v));
  return v;
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(v));
  return v;
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The address of this CTA's shared-memory location `addr` in the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t map_shared(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ int4 ld_cluster_v4(uint32_t addr) {
  int4 v;
  asm volatile("ld.shared::cluster.v4.s32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// ---- The epilogue -------------------------------------------------------------------------------------------------
// Output (token, channel) = fp32(acc - z * row_sum) * (s_x * s) + bias, the mma kernel's arithmetic (w4a8_kernel.cuh).
// Its operands are copied into their own shared memory (WgConfig::kOp*) by every thread when the CTA starts, 4-byte
// cp.async for the caller's arrays (s_x, row sums, bias: 4-byte aligned), 16-byte for the packed scales and zeros;
// rows past M repeat row M - 1 (never stored), channels past N (bias) and past the padded N (scales, zeros) read as 0.
// Until session 23 the epilogue loaded them after the main loop: two dependent global round trips (s_x staged through
// shared memory with two barriers, then the channel operands) between the last wgmma and the first store.
template <int kTok, bool kGroup>
__device__ __forceinline__ void copy_epilogue_operands(const KernelParams& p, int tok0, int nb0, uint32_t smem_base) {
  using C = WgConfig<kTok>;
  const int ch0 = nb0 * kTileN;
  constexpr int kScaleChunks = kCtaChannels * 2 / 16, kZeroChunks = kGroup ? 0 : kCtaChannels / 16;
  constexpr int kTokItems = kGroup ? kTok : 2 * kTok;
  for (int i = threadIdx.x; i < kTokItems + kCtaChannels + kScaleChunks + kZeroChunks; i += kThreads) {
    if (i < kTokItems) {
      const int tt = i % kTok, tok = min(tok0 + tt, p.m - 1);
      const bool rs = i >= kTok;
      cp_async_ca_zfill<4>(smem_base + (rs ? C::kOpRsum : C::kOpSx) + tt * 4,
                           rs ? static_cast<const void*>(p.row_sum + tok) : static_cast<const void*>(p.sx + tok), true);
    } else if (i < kTokItems + kCtaChannels) {
      const int c = i - kTokItems, ch = ch0 + c;
      const bool ok = p.bias != nullptr && ch < p.n;
      cp_async_ca_zfill<4>(smem_base + C::kOpBias + c * 4, ok ? p.bias + ch : p.sx, ok);
    } else if (i < kTokItems + kCtaChannels + kScaleChunks) {
      const int c = (i - kTokItems - kCtaChannels) * 8;  // 8 fp16 scales per chunk
      const bool ok = ch0 + c < p.n_pad;
      cp_async_ca_zfill<16>(smem_base + C::kOpScale + c * 2, ok ? p.scales + ch0 + c : p.scales, ok);
    } else {
      const int c = (i - kTokItems - kCtaChannels - kScaleChunks) * 16;  // 16 zero bytes per chunk
      const bool ok = ch0 + c < p.n_pad;
      cp_async_ca_zfill<16>(smem_base + C::kOpZero + c, ok ? p.zeros + ch0 + c : p.zeros, ok);
    }
  }
  cp_async_commit();
}

// The per-token operands in shared memory; constructing it waits for the CTA's operand copies (one barrier).
template <int kTok, bool kGroup>
struct TokenOperands {
  const float* sx;      // [kTok]
  const int32_t* rsum;  // [kTok] (qoq-c)

  // Every thread of the CTA calls this.
  __device__ __forceinline__ explicit TokenOperands(uint8_t* smem) {
    using C = WgConfig<kTok>;
    cp_async_wait<0>();
    __syncthreads();
    sx = reinterpret_cast<const float*>(smem + C::kOpSx);
    rsum = reinterpret_cast<const int32_t*>(smem + C::kOpRsum);
  }
};

struct ChannelOperands {
  float s_w = 0.0f, bias = 0.0f;
  int z = 0;
  // Channel c (0..127) of the CTA, from the operands copied to shared memory.
  template <int kTok, bool kGroup>
  __device__ __forceinline__ void load(const uint8_t* smem, int c) {
    using C = WgConfig<kTok>;
    s_w = __half2float(*reinterpret_cast<const __half*>(smem + C::kOpScale + 2 * c));
    bias = *reinterpret_cast<const float*>(smem + C::kOpBias + 4 * c);
    if constexpr (!kGroup) z = smem[C::kOpZero + c];
  }
};

template <bool kGroup>
__device__ __forceinline__ float output_value(int32_t v, float sx, int32_t rsum, const ChannelOperands& c) {
  if constexpr (!kGroup) v -= c.z * rsum;
  return __fmaf_rn(static_cast<float>(v), sx * c.s_w, c.bias);
}

// Four 8 x 8 b16 matrices from mma-fragment registers, transposed (PTX ISA, stmatrix): lane 8m + i gives the address
// of row i of matrix m, which receives column i of the fragment.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

__device__ __forceinline__ uint32_t pack_y2(float lo, float hi, bool fp16) {
  if (fp16) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// grid: x = column * rows + token tile (the token tiles of one column run together, so the second reads the
// weights from L2), z = K splits. kOwnX: each warpgroup streams X through its own ring (launch() takes it where the
// grid fits the SMs).
template <int kTok, bool kGroup, bool kOwnX>
__global__ void __launch_bounds__(kThreads, WgConfig<kTok>::kMinBlocks)
    w4a8_wgmma_kernel(const __grid_constant__ KernelParams p, const __grid_constant__ CUtensorMap xmap,
                      const __grid_constant__ CUtensorMap xmap_tail) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WgConfig<kTok>;
  // No static __shared__ (see the mma kernel's ticket flag); the X slots must start on the 512-byte period of the
  // 64-byte swizzle.
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  tl_stamp(0, tid == 0);
  tl_stamp(1, tid == 0);
  const int g = lane >> 2, t = lane & 3;
  const int rows = (p.m + kTok - 1) / kTok;
  const int col = blockIdx.x / rows, row_tile = blockIdx.x % rows;
  const int nb0 = col * kCtaBlocks, tok0 = row_tile * kTok;
  const bool x_tail = row_tile == rows - 1 && p.m % kTok != 0;
  // The X tensor map's descriptor, fetched now so that the first X copy does not wait for it.
  if (tid == 0) w8a8::prefetch_tensormap(x_tail ? &xmap_tail : &xmap);
  const int kt_begin = blockIdx.z * p.kt_per_split;
  const int n_kt = min(p.k_tiles, kt_begin + p.kt_per_split) - kt_begin;
  const int n_runs = (n_kt + C::kWT - 1) / C::kWT;
  // The split's runs in a rotated order per column when they are all whole: every column reads the same X tiles,
  // and in the same order all CTAs would ask L2 for the same lines at once (one tile of X served to every SM from a
  // few L2 slices). The CTAs of one column (its token tiles) keep one order: the second reads the weights from L2.
  // Integer sums, so the order changes no bit.
  const int rot = n_kt % C::kWT == 0 ? col * 5 % n_runs : 0;
  auto phys = [&](int run) { return run + rot < n_runs ? run + rot : run + rot - n_runs; };
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const bool group32 = p.group_size == 32;

  // Copies by the TMA engine (bulk copies; cp.async's per-thread copies kept the weights at ~1.3-1.7 TB/s whatever
  // the ring depth). W: lane 0 of warp w copies block nb0 + w's runs (codes and group meta; blocks past N read the
  // last block, never stored) into the warp's own ring. X: thread 0 copies each tile's box (the tensor map) once the
  // tile that used the slot before has left both warpgroups' tensor pipes.
  const int w_nb = min(nb0 + warp, p.n_blocks - 1);
  const uint8_t* w_src = p.codes + (size_t(w_nb) * p.k_tiles + kt_begin) * kTileBytes;
  const uint8_t* m_src = kGroup ? p.meta + size_t(w_nb) * p.num_groups * kMetaBytes : nullptr;
  auto first_group = [&](int run) { return ((kt_begin + phys(run) * C::kWT) * kTileK) >> p.group_shift; };
  const uint32_t w_ring = smem_base + C::kWOffset + warp * C::kWWarpBytes;
  const uint32_t w_full = smem_base + C::kBarOffset + warp * C::kDWS * 8;  // [kDWS], this warp's
  const uint32_t x_full = smem_base + C::kBarOffset + kWarps * C::kDWS * 8;
  const uint32_t x_empty = x_full + C::kXSlots * 8;
  // The warpgroup's X ring: kXR slots from x_ring, their full barriers from x_full_wg (kOwnX: warpgroup w's half).
  constexpr int kXR = kOwnX ? C::kXSlots / 2 : C::kXSlots;
  const int wg = warp >> 2;
  const uint32_t x_ring = smem_base + (kOwnX ? uint32_t(wg * kXR * C::kXBytes) : 0u);
  const uint32_t x_full_wg = x_full + (kOwnX ? uint32_t(wg * kXR * 8) : 0u);
  // Run `run` of this warp's block into ring slot `slot` (lane 0).
  auto load_w = [&](int run, int slot) {
    const uint32_t st = w_ring + uint32_t(slot) * C::kWRunBytes, bar = w_full + uint32_t(slot) * 8;
    const int t0 = phys(run) * C::kWT, nt = min(C::kWT, n_kt - t0);
    int mbytes = 0;
    if constexpr (kGroup)
      mbytes = ((((kt_begin + t0 + nt) * kTileK - 1) >> p.group_shift) - first_group(run) + 1) * kMetaBytes;
    mbar_expect_tx(bar, nt * kTileBytes + mbytes);
    bulk_g2s(st, w_src + size_t(t0) * kTileBytes, nt * kTileBytes, bar);
    if constexpr (kGroup)
      bulk_g2s(st + C::kWT * kTileBytes, m_src + size_t(first_group(run)) * kMetaBytes, mbytes, bar);
  };
  // Tile j of the split into slot j % kXR of the ring (thread 0; kOwnX: each warpgroup's first thread, its own ring):
  // K kt * 64 .. + 63 of tokens tok0 .. tok0 + kTok - 1. The last token tile of an M that is not a multiple of kTok
  // takes a box of its M % kTok rows (xmap_tail): boxes reaching past M (zero-filled by the TMA) made a call up to 10%
  // slower (wg256 at M = 192, session 22). The slot's rows past M then keep stale bytes, whose products land in
  // accumulator rows that are never stored.
  const CUtensorMap* x_map = x_tail ? &xmap_tail : &xmap;
  const int x_bytes = x_tail ? (p.m % kTok) * kTileK : C::kXBytes;
  auto load_x = [&](int j) {
    const uint32_t bar = x_full_wg + uint32_t(j % kXR) * 8;
    const int kt = kt_begin + phys(j / C::kWT) * C::kWT + j % C::kWT;
    mbar_expect_tx(bar, x_bytes);
    w8a8::tma_load_2d(x_ring + uint32_t(j % kXR) * C::kXBytes, x_map, kt * kTileK, tok0, bar);
  };

  // Each lane 0 initializes its warp's barriers (the X producer's, warp 0 or kOwnX the first warp of each warpgroup,
  // its ring's too) and at once requests what they guard: the first X tile (its tensor map was prefetched at entry),
  // the warp's weight runs, then X tiles 1.. . The other threads wait on a barrier only after the block barrier below,
  // which orders the initialization before their waits. (Until session 23 the requests came after that barrier; the
  // first X tile then arrived 0.8-1.3 µs after the first weights.) After the barrier every thread requests its share
  // of the epilogue's operands, while the first tiles are in flight.
  if (lane == 0) {
    for (int i = 0; i < C::kDWS; ++i) mbar_init(w_full + i * 8, 1);
    const bool x_producer = kOwnX ? warp % 4 == 0 : warp == 0;
    if (x_producer) {
      for (int i = 0; i < kXR; ++i) {
        mbar_init(x_full_wg + i * 8, 1);
        if (!kOwnX) mbar_init(x_empty + i * 8, 2);  // one arrival per warpgroup
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if (x_producer && n_kt > 0) load_x(0);
    for (int r = 0; r < C::kDWS && r < n_runs; ++r) load_w(r, r);
    if (x_producer)
      for (int j = 1; j < kXR && j < n_kt; ++j) load_x(j);
  }
  tl_stamp(2, tid == 0);
  __syncthreads();
  copy_epilogue_operands<kTok, kGroup>(p, tok0, nb0, smem_base);

  uint32_t d[kTok / 2];
#pragma unroll
  for (int i = 0; i < kTok / 2; ++i) d[i] = 0;

  // A run's shared-memory addresses for this lane, computed once per run: its codes in ring slot `slot` and the
  // group-meta word of each of its tiles' first k-step (group 32: k-step 1's is the next group's, kMetaBytes on).
  struct RunAddr {
    uint32_t codes;
    uint32_t meta[C::kWT];
  };
  auto run_addr = [&](int run, int slot) {
    RunAddr r;
    const uint32_t st = w_ring + uint32_t(slot) * C::kWRunBytes;
    r.codes = st + lane * 16;
    const int kt0 = kt_begin + phys(run) * C::kWT, group0 = (kt0 * kTileK) >> p.group_shift;
#pragma unroll
    for (int u = 0; u < C::kWT; ++u)
      r.meta[u] = st + C::kWT * kTileBytes + g * 4 + ((((kt0 + u) * kTileK) >> p.group_shift) - group0) * kMetaBytes;
    return r;
  };
  // A fragments of both k-steps of the run's tile u ([k-step][A register]).
  // Group 32 puts the tile's k-steps in two groups (two meta words); otherwise one word serves both, and the branch
  // lets the compiler share the k-steps' dequantization constants.
  auto dequant_tile = [&](const RunAddr& r, int u, uint32_t(&a)[2][4]) {
    const uint4 w = lds128(r.codes + u * kTileBytes);
    if constexpr (kGroup) {
      const uint32_t mw0 = lds32(r.meta[u]);
      if (group32) {
        tile_fragments<kGroup>(w, mw0, lds32(r.meta[u] + kMetaBytes), a);
      } else {
        tile_fragments<kGroup>(w, mw0, mw0, a);
      }
    } else {
      tile_fragments<kGroup>(w, 0, 0, a);
    }
  };
  // Issues (does not wait for) the tile's two k-steps from slot x of the ring: K bytes 32s .. 32s + 31 of the 64-byte
  // rows.
  const uint64_t desc0 = w8a8::sw64_desc(x_ring);
  auto mma_tile = [&](int x, const uint32_t(&a)[2][4]) {
    fence_operands(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgmma_rs<kTok>(d, a[0], desc0 + uint64_t((x * C::kXBytes) >> 4));
    wgmma_rs<kTok>(d, a[1], desc0 + uint64_t((x * C::kXBytes + 32) >> 4));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };

  // Per tile j: wait for its X, issue its wgmma, wait for tile j - 1's (so one stays queued in the tensor pipe while
  // this warpgroup works), release (kOwnX: refill) j - 1's X slot, and dequantize tile j + 1 into the A registers
  // j - 1 used. Two A register sets in turn (a wgmma reads its A registers until it completes); the loop is unrolled
  // over kXSlots tiles (whole weight runs, whole laps of either ring), so every X slot, barrier and register set is
  // fixed in the code.
  uint32_t a[2][2][4];
  RunAddr ra = run_addr(0, 0);
  if (n_kt > 0) {
    mbar_wait(w_full, 0);
    tl_stamp(3, tid == 0);
    dequant_tile(ra, 0, a[0]);
  }
  int wslot = 0;  // the ring slot of the run of the next tile to dequantize
  for (int lap = 0; lap * C::kXSlots < n_kt; ++lap) {
#pragma unroll
    for (int u = 0; u < C::kXSlots; ++u) {
      const int j = lap * C::kXSlots + u;
      if (j >= n_kt) break;
      const int x = u % kXR;  // tile j's slot in the warpgroup's ring; its pass over the ring is j / kXR
      mbar_wait(x_full_wg + x * 8, (kOwnX ? 2 * lap + u / kXR : lap) & 1);
      tl_stamp(4, tid == 0 && j == 0);
      mma_tile(x, a[u & 1]);
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      fence_operands(d);
      // Tile j - 1 has left this warpgroup's tensor pipe. kOwnX: the warpgroup's first thread refills its slot at
      // once. Shared ring: release the slot; thread 0 refills it once both warpgroups have. (Measured: the second
      // warpgroup to release a slot refilling it, by a shared-memory atomic instead of the wait, was 1-12% slower: the
      // atomic's acquire-release compiles to MEMBAR.ALL.CTA. Session 23: the two warpgroups' first threads refilling
      // alternate slots was 2-6% slower: the warpgroups then wait on each other in lockstep, while with one producer
      // the other warpgroup runs ahead; docs/int8_w4a8.md. Session 24: rings of their own, which double X's reads
      // from L2, were up to 9% faster where a CTA has its SM alone, up to 47% slower where two CTAs share one or at
      // wg256.)
      if constexpr (kOwnX) {
        // One predicate, one branch (bitwise &). The refill as nested branches, on the path of the warp that also
        // issues the warpgroup's wgmma, and the dequantization below called in each branch of the run change, took
        // the own rings' gain away (3.5% over the cells that take this kernel, H200, session 24).
        const bool refill = ((tid & 127) == 0) & (j >= 1) & (j - 1 + kXR < n_kt);
        if (refill) load_x(j - 1 + kXR);
      } else if (j >= 1) {
        const int prev = (u + C::kXSlots - 1) % C::kXSlots;  // tile j - 1's slot
        if ((tid & 127) == 0) mbar_arrive(x_empty + prev * 8);
        if (tid == 0 && j + C::kXSlots - 1 < n_kt) {
          mbar_wait(x_empty + prev * 8, ((j - 1) / C::kXSlots) & 1);
          load_x(j + C::kXSlots - 1);
        }
      }
      // Tile j + 1 into the registers tile j - 1 used.
      const int jn = j + 1, pos = (u + 1) % C::kWT, run = jn / C::kWT;
      if (jn < n_kt) {
        if (pos == 0) {
          // Tile j + 1 starts run `run`: the previous run's slot is read (tile j was dequantized one step ago);
          // refill it, then wait for this run.
          __syncwarp();
          if (lane == 0 && run - 1 + C::kDWS < n_runs) {
            fence_proxy_async();  // the warp's reads of the slot (ordered by __syncwarp) before the copy's writes
            load_w(run - 1 + C::kDWS, wslot);
          }
          wslot = wslot + 1 == C::kDWS ? 0 : wslot + 1;
          ra = run_addr(run, wslot);
          mbar_wait(w_full + wslot * 8, (run / C::kDWS) & 1);
        }
        dequant_tile(ra, pos, a[(u + 1) & 1]);
      }
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_operands(d);
  cp_async_wait<0>();  // the epilogue operands (landed long ago; no thread leaves with a copy in flight)
  tl_stamp(5, tid == 0);
  tl_stamp(6, tid == 128);

  // Register 4j + i: channel 16 (nb0 + warp) + g + 8 (i >> 1), token tok0 + 8j + 2t + (i & 1) (PTX ISA, wgmma D
  // fragment; as the mma kernel's fragment (b, mt = j, i)).
  constexpr int kChunks = kTok / 8;
  // Chunks [j0, j1) of the tile are this CTA's to store: all of them, but in a cluster each split CTA stores its share.
  int j0 = 0, j1 = kChunks;
  const bool in_cluster = gridDim.z > 1 && cluster_size() == gridDim.z;
  if (in_cluster) {
    // Split-K through distributed shared memory (the K splits of a tile launched as one cluster): every CTA puts its
    // int32 partial in its X ring, then adds the cluster's partials of its share of the chunks (pairs of 8-token
    // chunks, for stmatrix) and stores them. Integer sums: the same output bits as the ticket path below.
    const uint32_t part = smem_base + uint32_t(tid) * 16;  // + j * kThreads * 16: chunk j
    __syncthreads();                                       // both warpgroups' wgmma have left the X ring
#pragma unroll
    for (int j = 0; j < kChunks; ++j)
      if (tok0 + 8 * j < p.m)
        st_shared_v4(part + j * kThreads * 16, d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
    tl_stamp(7, tid == 0);
    cluster_arrive();
    cluster_wait();
    tl_stamp(8, tid == 0);
    const int cs = int(gridDim.z), rank = int(cluster_rank()), pairs = kChunks / 2;
    j0 = 2 * (rank * pairs / cs);
    j1 = 2 * ((rank + 1) * pairs / cs);
    for (int r = 1; r < cs; ++r) {
      const uint32_t remote = map_shared(part, uint32_t((rank + r) % cs));
#pragma unroll
      for (int j = 0; j < kChunks; ++j)
        if (j >= j0 && j < j1 && tok0 + 8 * j < p.m) {
          const int4 v = ld_cluster_v4(remote + j * kThreads * 16);
          d[4 * j] += uint32_t(v.x);
          d[4 * j + 1] += uint32_t(v.y);
          d[4 * j + 2] += uint32_t(v.z);
          d[4 * j + 3] += uint32_t(v.w);
        }
    }
    cluster_arrive();  // this CTA's reads of the others' partials are done; it waits for theirs before it exits
  } else if (gridDim.z > 1) {
    // Split-K exactly as the mma kernel: own slot of the partials ([tile][split][chunk][thread] int4), only chunks
    // whose first token is < M; the last CTA of the tile by ticket adds the others.
    int* s_last = reinterpret_cast<int*>(smem);
    __syncthreads();  // every warp is done reading the staging buffers that hold the flag
    const unsigned ticket = blockIdx.x;
    auto slot = [&](int split, int j) {
      return p.partials + ((size_t(ticket) * gridDim.z + split) * kChunks + j) * kThreads + tid;
    };
    auto stored = [&](int j) { return tok0 + 8 * j + 2 * t < p.m; };
#pragma unroll
    for (int j = 0; j < kChunks; ++j)
      if (stored(j)) __stcg(slot(blockIdx.z, j), make_int4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]));
    tl_stamp(7, tid == 0);
    if (!split_k_arrive(p.tickets, ticket, s_last)) return;
    tl_stamp(8, tid == 0);
    for (int z = 0; z < int(gridDim.z); ++z) {
      if (z == int(blockIdx.z)) continue;
#pragma unroll
      for (int j = 0; j < kChunks; ++j)
        if (stored(j)) {
          const int4 v = __ldcg(slot(z, j));
          d[4 * j] += uint32_t(v.x);
          d[4 * j + 1] += uint32_t(v.y);
          d[4 * j + 2] += uint32_t(v.z);
          d[4 * j + 3] += uint32_t(v.w);
        }
    }
    if (tid == 0) p.tickets[ticket] = 0;
  }

  // Epilogue: the mma kernel's arithmetic (w4a8_kernel.cuh), so the same output bits, on the operands copied to shared
  // memory at the start (the per-channel ones then read into registers).
  const TokenOperands<kTok, kGroup> top(smem);
  ChannelOperands cop[2];
  cop[0].load<kTok, kGroup>(smem, warp * kTileN + g);
  cop[1].load<kTok, kGroup>(smem, warp * kTileN + g + 8);
  const int ch0 = (nb0 + warp) * kTileN + g;
  auto value = [&](int j, int h, int e) {
    const int tt = 8 * j + 2 * t + e;  // token in the tile
    return output_value<kGroup>(int32_t(d[4 * j + 2 * h + e]), top.sx[tt], kGroup ? 0 : top.rsum[tt], cop[h]);
  };
  const bool vec = p.y_dtype != 2 && p.ldy % 8 == 0 && (reinterpret_cast<uintptr_t>(p.y) & 15) == 0;
  // Stores chunks [lo, hi) of the tile: all of them (kWhole, bounds known at compile time: 1-2% faster than the
  // cluster form on unsplit grids), or [j0, j1) in a cluster.
  auto store = [&](auto whole) {
    constexpr bool kWhole = decltype(whole)::value;
    const int lo = kWhole ? 0 : j0, hi = kWhole ? kChunks : j1;
    if (vec) {
      // bf16 / fp16: the warp's 16 channels x kTok tokens go through kTok x 32 bytes of the idle X ring (whole tiles)
      // or weight rings (a cluster's share: the X ring holds the partial the others read) as [token][16 channels],
      // written by stmatrix (transposed), then leave as 16-byte stores of 8 channels.
      const bool fp16 = p.y_dtype == 1;
      const uint32_t stage = smem_base + (kWhole ? 0u : uint32_t(C::kStageOffset)) + uint32_t(warp) * kTok * 32;
#pragma unroll
      for (int j = 0; j < kChunks; j += 2) {
        if (j < lo || j >= hi) continue;
        uint32_t r[4];  // matrix 2 jj + h: tokens 8 (j + jj) .., channels 8 h ..
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
#pragma unroll
          for (int h = 0; h < 2; ++h) r[2 * jj + h] = pack_y2(value(j + jj, h, 0), value(j + jj, h, 1), fp16);
        const int m = lane >> 3, i = lane & 7;
        stmatrix_x4_trans(stage + uint32_t((8 * (j + (m >> 1)) + i) * 32 + (m & 1) * 16), r[0], r[1], r[2], r[3]);
      }
      __syncwarp();
      const int chb = (nb0 + warp) * kTileN;
#pragma unroll 4
      for (int v = 16 * lo + lane; v < 16 * hi; v += 32) {
        const int tok = tok0 + (v >> 1), ch = chb + 8 * (v & 1);
        if (tok >= p.m || ch >= p.n) continue;
        const uint4 y = lds128(stage + uint32_t(v) * 16);
        uint16_t* dst = static_cast<uint16_t*>(p.y) + size_t(tok) * p.ldy + ch;
        if (ch + 8 <= p.n) {
          *reinterpret_cast<uint4*>(dst) = y;
        } else {
          for (int c = 0; c < p.n - ch; ++c) {  // N % 8 != 0: the last vector's channels below N
            const uint32_t w = c < 2 ? y.x : c < 4 ? y.y : c < 6 ? y.z : y.w;
            dst[c] = uint16_t(w >> (16 * (c & 1)));
          }
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (ch0 + 8 * h >= p.n) continue;
#pragma unroll
        for (int j = 0; j < kChunks; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (j < lo || j >= hi) continue;
            const int tok = tok0 + 8 * j + 2 * t + e;
            if (tok < p.m) store_y(p.y, p.y_dtype, size_t(tok) * p.ldy + ch0 + 8 * h, value(j, h, e));
          }
      }
    }
  };
  if (in_cluster) {
    store(std::false_type{});
  } else {
    store(std::true_type{});
  }
  if (in_cluster) cluster_wait();  // the others have read this CTA's partial
  tl_stamp(9, tid == 0);
#endif
}

template <int kTok, bool kGroup, bool kOwnX>
Status prepare() {
  static std::atomic<uint32_t> done_mask{0};
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  const uint32_t bit = 1u << (dev & 31);
  if (!(done_mask.load(std::memory_order_acquire) & bit)) {
    QDEC_CUDA_RETURN(cudaFuncSetAttribute(w4a8_wgmma_kernel<kTok, kGroup, kOwnX>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          std::max(WgConfig<kTok>::kSmemBytes, kOneCtaSmemBytes)));
    done_mask.fetch_or(bit, std::memory_order_acq_rel);
  }
  return Status::Ok();
}

template <int kTok, bool kGroup>
Status occupancy_of(int* blocks) {
  static std::atomic<int> cache{0};
  if (const int c = cache.load(std::memory_order_acquire); c > 0) {
    *blocks = c;
    return Status::Ok();
  }
  QDEC_RETURN_IF_ERROR((prepare<kTok, kGroup, false>()));
  QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, w4a8_wgmma_kernel<kTok, kGroup, false>,
                                                                 kThreads, WgConfig<kTok>::kSmemBytes));
  cache.store(std::max(*blocks, 1), std::memory_order_release);
  return Status::Ok();
}

// How many clusters of `splits` CTAs (1 x 1 x splits) with `smem` bytes of shared memory each the device runs at once
// (cudaOccupancyMaxActiveClusters; cached per cluster size and shared-memory choice).
template <int kTok, bool kGroup, bool kOwnX>
Status max_active_clusters(int splits, int smem, dim3 grid, int* clusters) {
  static std::atomic<int> cache[kMaxClusterSplits + 1][2] = {};
  const int big = smem > WgConfig<kTok>::kSmemBytes ? 1 : 0;
  if (const int c = cache[splits][big].load(std::memory_order_acquire); c > 0) {
    *clusters = c - 1;
    return Status::Ok();
  }
  QDEC_RETURN_IF_ERROR((prepare<kTok, kGroup, kOwnX>()));
  LaunchConfig cfg(grid, dim3(kThreads), smem, nullptr, false);
  cfg.set_cluster(dim3(1, 1, splits));
  int n = 0;
  QDEC_CUDA_RETURN(cudaOccupancyMaxActiveClusters(&n, w4a8_wgmma_kernel<kTok, kGroup, kOwnX>, cfg.get()));
  cache[splits][big].store(n + 1, std::memory_order_release);
  *clusters = n;
  return Status::Ok();
}

// The cluster size of a launch of `grid` with `smem` bytes of shared memory per CTA: grid.z (the K splits of a tile
// in one cluster) when 2 <= grid.z <= kMaxClusterSplits and the clusters take no more rounds of the SMs than the
// CTAs alone, else 1.
template <int kTok, bool kGroup, bool kOwnX>
Status split_k_clusters(dim3 grid, int smem, int sm_count, int* cluster) {
  *cluster = 1;
  if (!kClusterSplitK || grid.z < 2 || grid.z > unsigned(kMaxClusterSplits)) return Status::Ok();
  int per_sm = 0, clusters = 0;
  QDEC_RETURN_IF_ERROR((occupancy_of<kTok, kGroup>(&per_sm)));
  if (smem > WgConfig<kTok>::kSmemBytes) per_sm = 1;
  QDEC_RETURN_IF_ERROR((max_active_clusters<kTok, kGroup, kOwnX>(int(grid.z), smem, grid, &clusters)));
  const long long ctas = static_cast<long long>(grid.x) * grid.z, slots = static_cast<long long>(per_sm) * sm_count;
  if (clusters > 0 && (grid.x + clusters - 1) / clusters <= (ctas + slots - 1) / slots) *cluster = int(grid.z);
  return Status::Ok();
}

// A grid that fits the SMs runs one CTA per SM (kOneCtaSmemBytes).
inline bool fits_sms(dim3 grid, int sm_count) {
  return static_cast<long long>(grid.x) * grid.z <= sm_count;
}

// The shared memory per CTA of a launch of `grid`.
template <int kTok>
int launch_smem(dim3 grid, int sm_count) {
  return fits_sms(grid, sm_count) ? std::max(WgConfig<kTok>::kSmemBytes, kOneCtaSmemBytes) : WgConfig<kTok>::kSmemBytes;
}

// Each warpgroup its own X ring (kOwnX) where a wg64 / wg128 CTA has its SM alone. Session 24 (two rings of 4 slots
// against the shared 8, the 32 cells of the benchmark that take it): 0.92-1.00x the time on the H200 (geometric mean
// 0.974), 0.95-1.03x on the H100 (0.986); with two CTAs per SM or at wg256 the doubled X reads from L2 made it up to
// 47% slower (docs/int8_w4a8.md).
template <int kTok>
bool own_x_rings(dim3 grid, int sm_count) {
  return kTok < 256 && fits_sms(grid, sm_count);
}

template <int kTok, bool kGroup, bool kOwnX>
Status launch_as(const KernelParams& kp, dim3 grid, int sm_count, cudaStream_t stream) {
  QDEC_RETURN_IF_ERROR((prepare<kTok, kGroup, kOwnX>()));
  const int smem = launch_smem<kTok>(grid, sm_count);
  // Split-K in clusters where the clusters take no more rounds of the SMs than the CTAs would alone (clusters are
  // placed whole, within one GPC, so a GPC's spare SMs may take no cluster).
  int cluster = 1;
  QDEC_RETURN_IF_ERROR((split_k_clusters<kTok, kGroup, kOwnX>(grid, smem, sm_count, &cluster)));
  // X [M, ldq] as boxes of kTok rows x one 64-K tile (w4a8_gemm validated: 16-byte aligned, ldq a multiple of 16),
  // and of the last token tile's M % kTok rows.
  CUtensorMap xmap{}, xmap_tail{};
  QDEC_RETURN_IF_ERROR(w8a8::int8_tensor_map(&xmap, kp.xq, kp.m, kp.k_tiles * kTileK, kp.ldq, kTileK, kTok,
                                             CU_TENSOR_MAP_SWIZZLE_64B, "w4a8 x"));
  xmap_tail = xmap;
  if (kp.m % kTok != 0)
    QDEC_RETURN_IF_ERROR(w8a8::int8_tensor_map(&xmap_tail, kp.xq, kp.m, kp.k_tiles * kTileK, kp.ldq, kTileK,
                                               kp.m % kTok, CU_TENSOR_MAP_SWIZZLE_64B, "w4a8 x tail"));
  LaunchConfig cfg(grid, dim3(kThreads), smem, stream, false);
  if (cluster > 1) cfg.set_cluster(dim3(1, 1, cluster));
  QDEC_CUDA_RETURN(cudaLaunchKernelEx(cfg.get(), w4a8_wgmma_kernel<kTok, kGroup, kOwnX>, kp, xmap, xmap_tail));
  return cuda_status(cudaGetLastError(), "w4a8_wgmma_kernel launch");
}

// Calls f(std::bool_constant<kOwnX>{}, sm_count) with the X-ring form own_x_rings picks for `grid` on the current
// device: the one place that rule is applied, so that the launch and the planner's cluster query agree.
template <int kTok, class F>
Status with_x_rings(dim3 grid, F&& f) {
  DeviceInfo dev;
  QDEC_RETURN_IF_ERROR(current_device_info(&dev));
  if constexpr (kTok < 256) {
    if (own_x_rings<kTok>(grid, dev.sm_count)) return f(std::true_type{}, dev.sm_count);
  }
  return f(std::false_type{}, dev.sm_count);
}

template <int kTok, bool kGroup>
Status launch(const KernelParams& kp, dim3 grid, cudaStream_t stream) {
  return with_x_rings<kTok>(grid, [&](auto own_x, int sm_count) {
    return launch_as<kTok, kGroup, decltype(own_x)::value>(kp, grid, sm_count, stream);
  });
}

// The cluster size launch() takes for `grid`.
template <int kTok, bool kGroup>
Status cluster_of(dim3 grid, int* cluster) {
  return with_x_rings<kTok>(grid, [&](auto own_x, int sm_count) {
    return split_k_clusters<kTok, kGroup, decltype(own_x)::value>(grid, launch_smem<kTok>(grid, sm_count), sm_count,
                                                                  cluster);
  });
}

Status bad_tokens(int tokens) {
  return Status(StatusCode::kInvalidArgument,
                "w4a8: wgmma token tile " + std::to_string(tokens) + " is not one of 64, 128, 256");
}

}  // namespace

#if QDEC_W4A8_TIMELINE
// Probe builds: how many clusters of `splits` CTAs run at once (wg128, group), with one-CTA or configured smem.
Status wgmma_cluster_capacity(int tokens, int splits, bool one_cta, int* clusters) {
  const dim3 grid(splits == 1 ? 1 : 64, 1, splits);
  switch (tokens) {
    case 64:
      return max_active_clusters<64, true, false>(splits, one_cta ? kOneCtaSmemBytes : WgConfig<64>::kSmemBytes, grid,
                                                  clusters);
    case 128:
      return max_active_clusters<128, true, false>(splits, one_cta ? kOneCtaSmemBytes : WgConfig<128>::kSmemBytes, grid,
                                                   clusters);
    default:
      return max_active_clusters<256, true, false>(splits, one_cta ? kOneCtaSmemBytes : WgConfig<256>::kSmemBytes, grid,
                                                   clusters);
  }
}
// Probe builds: resets (all stamps 0) or reads g_timeline.
Status wgmma_timeline(bool reset, std::vector<unsigned long long>* out) {
  if (reset) {
    std::vector<unsigned long long> z(kTlCtas * kTlSlots, 0);
    QDEC_CUDA_RETURN(cudaMemcpyToSymbol(g_timeline, z.data(), z.size() * 8));
    return Status::Ok();
  }
  out->resize(kTlCtas * kTlSlots);
  QDEC_CUDA_RETURN(cudaMemcpyFromSymbol(out->data(), g_timeline, out->size() * 8));
  return Status::Ok();
}
#endif

Status wgmma_kernel_supported() {
  return sm90a_kernel_status<w4a8_wgmma_kernel<64, true, false>>("w4a8 wgmma paths");
}

Status wgmma_kernel_occupancy(int tokens, bool group, int* blocks) {
  switch (tokens) {
    case 64:
      return group ? occupancy_of<64, true>(blocks) : occupancy_of<64, false>(blocks);
    case 128:
      return group ? occupancy_of<128, true>(blocks) : occupancy_of<128, false>(blocks);
    case 256:
      return group ? occupancy_of<256, true>(blocks) : occupancy_of<256, false>(blocks);
  }
  return bad_tokens(tokens);
}

Status wgmma_split_k_cluster(int tokens, bool group, dim3 grid, int* cluster) {
  switch (tokens) {
    case 64:
      return group ? cluster_of<64, true>(grid, cluster) : cluster_of<64, false>(grid, cluster);
    case 128:
      return group ? cluster_of<128, true>(grid, cluster) : cluster_of<128, false>(grid, cluster);
    case 256:
      return group ? cluster_of<256, true>(grid, cluster) : cluster_of<256, false>(grid, cluster);
  }
  return bad_tokens(tokens);
}

Status wgmma_kernel_launch(int tokens, bool group, const KernelParams& kp, dim3 grid, cudaStream_t stream) {
  switch (tokens) {
    case 64:
      return group ? launch<64, true>(kp, grid, stream) : launch<64, false>(kp, grid, stream);
    case 128:
      return group ? launch<128, true>(kp, grid, stream) : launch<128, false>(kp, grid, stream);
    case 256:
      return group ? launch<256, true>(kp, grid, stream) : launch<256, false>(kp, grid, stream);
  }
  return bad_tokens(tokens);
}

}  // namespace qdec::w4a8
