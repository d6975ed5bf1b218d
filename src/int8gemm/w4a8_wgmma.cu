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
// - The prepack permutes K inside each 64-K tile (lane t holds K 16t .. 16t + 15, for the mma kernel's 16-byte X
//   loads), so X carries the same permutation: 4-byte word 4a + b of a token's 64 bytes goes to 16-byte chunk b,
//   word a. Then k-step s reads chunks 2s and 2s + 1 in wgmma's canonical K-major layout without swizzle (core
//   matrices of 8 tokens x 16 bytes: [8-token group][chunk][token % 8][16 bytes], LBO 128 bytes, SBO 512 bytes).
//   A small kernel first writes X into the workspace in that order, as the image of each (token tile, 64-K tile)
//   in shared memory, so that one bulk copy moves it.
// - CTA = 2 warpgroups = 128 channels (8 blocks) x kTok tokens. Copies by the TMA engine (cp.async.bulk, one per
//   warp and run of kWT tiles for its weight block and group meta, one per tile for X) into two rings, W kDWS runs
//   ahead and X kDX tiles, completing on mbarriers; one __syncthreads per tile frees the slots. Each warpgroup issues
//   the tile's two wgmma, dequantizes the next tile meanwhile, then waits for them.
// - Measured on the H200 and replaced (docs/int8_w4a8.md, "How it got there"): X gathered by 4-byte cp.async into
//   shared memory (L1 82% busy, ncu at 28672 x 4096, M = 128; no faster than the mma kernel); per-thread 16-byte
//   cp.async for W and X at any ring depth (the weights streamed at ~1.3-1.7 TB/s, e.g. 45 us at M = 16 on 28672 x
//   4096); a producer warp (lost occupancy); two tiles per barrier (no gain; wg256 slower). The kernel is
//   issue-bound on its per-tile bookkeeping (ncu: ~146 warp instructions per warp and 64-K tile).
// - int32 until the epilogue, so split-K partials add exactly: the same per-split partials and ticket as the mma
//   kernel (w4a8_kernel.cuh), the same epilogue arithmetic, hence the same output bits as the kTokens paths.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "int8gemm/w4a8_kernel.cuh"
#include "int8gemm/w4a8_layout.h"
#include "int8gemm/w4a8_wgmma.h"
#include "int8gemm/wgmma_s8.cuh"
#include "runtime/cuda_check.h"

namespace qdec::w4a8 {
namespace {

template <int kTok_>
struct WgConfig {
  static constexpr int kTok = kTok_;
  static constexpr int kXBytes = kTok * kTileK;  // the permuted X tile
  // Two rings: the weights (DRAM) in runs of kWT 64-K tiles per block (one bulk copy of 2 KB and one of the runs'
  // group meta per warp), kDWS runs ahead; X (L2) kDX tiles ahead. One 512-byte copy per warp and tile cost ~181
  // warp instructions per warp and tile (ncu, 28672 x 4096, M = 16, 2.1 issued per cycle); runs of 4: ~146.
  static constexpr int kWT = 4;
  static constexpr int kRunMetaBytes = 2 * kWT * kMetaBytes;  // at most 8 groups of 32 per run (group size 32)
  static constexpr int kWSlotBytes = kCtaBlocks * (kWT * kTileBytes + kRunMetaBytes);
  static constexpr int kWMetaOffset = kCtaBlocks * kWT * kTileBytes;
  static constexpr int kDWS = kTok >= 256 ? 6 : 4;
  static constexpr int kDX = 4;
  static constexpr int kWSlots = kDWS;     // runs R .. R + kDWS - 1 (run R - 1's slot is refilled at run R's start)
  static constexpr int kXSlots = kDX + 1;  // tiles j - 1 (its wgmma in flight) .. j + kDX - 1
  static constexpr int kWOffset = kXSlots * kXBytes;
  static constexpr int kBarOffset = kWOffset + kWSlots * kWSlotBytes;
  static constexpr int kSmemBytes = kBarOffset + (kWSlots + kXSlots) * 8;
  static constexpr int kMinBlocks = kTok >= 256 ? 1 : 2;
  static_assert(kXBytes % 256 == 0 && kWSlotBytes % 256 == 0, "slots stay 256-byte aligned");
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

// ---- Bulk copies (the TMA engine) and mbarriers ----------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra "
      "wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
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

// X in the prepack's K order, as the kernel's shared-memory image of each (token tile, 64-K tile): for token r of
// the tile, word 4a + b of its 64 bytes goes to 16-byte chunk b, word a, at [r / 8][chunk][r % 8] (512 bytes per 8
// tokens), so that one bulk copy moves a tile. out is [rows][k_tiles][kTok * 64]; tokens past M are zeros. One
// thread per (64-K tile, token), tokens fastest: four 16-byte loads, four 16-byte stores (8 threads fill 128
// contiguous bytes per chunk).
__global__ void permute_x_kernel(const int8_t* __restrict__ xq, long long ldq, int m, int tok_tile, int k_tiles,
                                 long long padded_rows, uint8_t* __restrict__ out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= padded_rows * k_tiles) return;
  const long long r = i % padded_rows, kt = i / padded_rows;
  uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0, v2 = v0, v3 = v0;
  if (r < m) {
    const uint4* src = reinterpret_cast<const uint4*>(xq + r * ldq + kt * kTileK);
    v0 = __ldg(src);
    v1 = __ldg(src + 1);
    v2 = __ldg(src + 2);
    v3 = __ldg(src + 3);
  }
  const long long tile = r / tok_tile, rr = r % tok_tile;
  uint8_t* img =
      out + (tile * k_tiles + kt) * (static_cast<long long>(tok_tile) * kTileK) + (rr >> 3) * 512 + (rr & 7) * 16;
  *reinterpret_cast<uint4*>(img) = make_uint4(v0.x, v1.x, v2.x, v3.x);
  *reinterpret_cast<uint4*>(img + 128) = make_uint4(v0.y, v1.y, v2.y, v3.y);
  *reinterpret_cast<uint4*>(img + 256) = make_uint4(v0.z, v1.z, v2.z, v3.z);
  *reinterpret_cast<uint4*>(img + 384) = make_uint4(v0.w, v1.w, v2.w, v3.w);
}

// ---- The epilogue -------------------------------------------------------------------------------------------------
// Output (token, channel) = fp32(acc - z * row_sum) * (s_x * s) + bias, the mma kernel's arithmetic (w4a8_kernel.cuh),
// with the operands loaded before any store (read between the stores, each load is ordered after the stores before it:
// Y may alias them as far as the compiler knows). The per-token operands of the CTA's kTok tokens go through shared
// memory, staged by the whole CTA after its last read of the staging buffers; the per-channel ones sit in
// registers. (The mma kernel keeps its loads in the store loop: staging there measured ~10% slower at M = 64-128.)
template <int kTok, bool kGroup>
struct TokenOperands {
  const float* sx;      // [kTok], shared memory
  const int32_t* rsum;  // [kTok], shared memory (qoq-c)

  // Every thread of the CTA calls this (two barriers), after its last use of smem's first 8 * kTok bytes.
  __device__ __forceinline__ TokenOperands(const KernelParams& p, int tok0, uint8_t* smem) {
    float* sx_s = reinterpret_cast<float*>(smem);
    int32_t* rs_s = reinterpret_cast<int32_t*>(smem + kTok * 4);
    __syncthreads();
    for (int i = threadIdx.x; i < kTok; i += blockDim.x) {
      const int tok = min(tok0 + i, p.m - 1);  // rows past M: never stored
      sx_s[i] = p.sx[tok];
      if constexpr (!kGroup) rs_s[i] = p.row_sum[tok];
    }
    __syncthreads();
    sx = sx_s;
    rsum = rs_s;
  }
};

struct ChannelOperands {
  float s_w = 0.0f, bias = 0.0f;
  int z = 0;
  __device__ __forceinline__ void load(const KernelParams& p, int ch, bool group) {
    if (ch >= p.n) return;
    s_w = __half2float(__ushort_as_half(p.scales[ch]));
    bias = p.bias ? p.bias[ch] : 0.0f;
    z = group ? 0 : p.zeros[ch];
  }
};

template <bool kGroup>
__device__ __forceinline__ void store_output(const KernelParams& p, int tok, int ch, int32_t v, float sx, int32_t rsum,
                                             const ChannelOperands& c) {
  if constexpr (!kGroup) v -= c.z * rsum;
  store_y(p.y, p.y_dtype, size_t(tok) * p.ldy + ch, __fmaf_rn(static_cast<float>(v), sx * c.s_w, c.bias));
}

// grid: x = column * rows + token tile (the token tiles of one column run together, so the second reads the
// weights from L2), z = K splits.
template <int kTok, bool kGroup>
__global__ void __launch_bounds__(kThreads, WgConfig<kTok>::kMinBlocks)
    w4a8_wgmma_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WgConfig<kTok>;
  extern __shared__ __align__(256) uint8_t smem[];  // no static __shared__ (see the mma kernel's ticket flag)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int rows = (p.m + kTok - 1) / kTok;
  const int col = blockIdx.x / rows, row_tile = blockIdx.x % rows;
  const int nb0 = col * kCtaBlocks, tok0 = row_tile * kTok;
  const int kt_begin = blockIdx.z * p.kt_per_split;
  const int kt_end = min(p.k_tiles, kt_begin + p.kt_per_split);
  const int n_kt = kt_end - kt_begin;
  // The split's tiles in a rotated order, whole runs of kWT apart per CTA: every CTA reads the same X image, and in
  // the same order they all read the same L2 lines at once. Integer sums, so the order changes no bit.
  const int rot = n_kt % C::kWT == 0 ? (int(blockIdx.x) * 5 % (n_kt / C::kWT)) * C::kWT : 0;
  auto kt_of = [&](int i) { return kt_begin + (i + rot < n_kt ? i + rot : i + rot - n_kt); };
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // Copies by the TMA engine (bulk copies; cp.async's per-thread copies kept the weights at ~1.3-1.7 TB/s whatever
  // the ring depth). W: lane 0 of warp w copies block nb0 + w's 512-byte tile and its group meta (blocks past N read
  // the last block, never stored) and arrives on the slot's W barrier (8 arrivals). X: thread 0 copies the tile's
  // image (permute_x_kernel; p.xq points at it) and arrives on the slot's X barrier.
  const int w_nb = min(nb0 + warp, p.n_blocks - 1);
  const uint8_t* w_src = p.codes + size_t(w_nb) * p.k_tiles * kTileBytes;
  const uint8_t* m_src = kGroup ? p.meta + size_t(w_nb) * p.num_groups * kMetaBytes : nullptr;
  auto first_group = [&](int run) { return (kt_of(run * C::kWT) * kTileK) >> p.group_shift; };
  const uint8_t* x_src = reinterpret_cast<const uint8_t*>(p.xq) + size_t(row_tile) * p.k_tiles * C::kXBytes;
  const uint32_t bars = smem_base + C::kBarOffset;  // [kWSlots] W barriers, then [kXSlots] X barriers
  auto w_bar = [&](int i) { return bars + uint32_t(i % C::kWSlots) * 8; };
  auto x_bar = [&](int i) { return bars + uint32_t(C::kWSlots + i % C::kXSlots) * 8; };
  if (tid == 0) {
    for (int i = 0; i < C::kWSlots; ++i) mbar_init(bars + i * 8, kWarps);
    for (int i = 0; i < C::kXSlots; ++i) mbar_init(bars + (C::kWSlots + i) * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Tile i (relative to the split's first) into its slots.
  auto load_x = [&](int i) {
    if (tid != 0) return;
    fence_proxy_async();  // the slot's previous reads (ordered by the block barrier) before the copy's writes
    const uint32_t bar = x_bar(i);
    mbar_expect_tx(bar, C::kXBytes);
    bulk_g2s(smem_base + uint32_t(i % C::kXSlots) * C::kXBytes, x_src + size_t(kt_of(i)) * C::kXBytes, C::kXBytes, bar);
  };
  auto load_w = [&](int run) {  // tiles kWT run .. of the split, as many as it has
    if (lane != 0) return;
    fence_proxy_async();
    const uint32_t st = smem_base + C::kWOffset + uint32_t(run % C::kWSlots) * C::kWSlotBytes, bar = w_bar(run);
    const int t0 = run * C::kWT, nt = min(C::kWT, n_kt - t0), kt0 = kt_of(t0);  // a run never wraps (rot)
    int mbytes = 0;
    if constexpr (kGroup) mbytes = ((((kt0 + nt) * kTileK - 1) >> p.group_shift) - first_group(run) + 1) * kMetaBytes;
    mbar_expect_tx(bar, nt * kTileBytes + mbytes);
    bulk_g2s(st + warp * (C::kWT * kTileBytes), w_src + size_t(kt0) * kTileBytes, nt * kTileBytes, bar);
    if constexpr (kGroup)
      bulk_g2s(st + C::kWMetaOffset + warp * C::kRunMetaBytes, m_src + size_t(first_group(run)) * kMetaBytes, mbytes,
               bar);
  };

  uint32_t d[kTok / 2];
#pragma unroll
  for (int i = 0; i < kTok / 2; ++i) d[i] = 0;

  // W runs kDWS runs ahead, X kDX tiles. While the wgmma of tile i runs, tile i + 1 is dequantized into the other
  // A registers.
  for (int r = 0; r < C::kDWS && r * C::kWT < n_kt; ++r) load_w(r);
  for (int i = 0; i < C::kDX && i < n_kt; ++i) load_x(i);
  auto x_addr = [&](int i) { return smem_base + uint32_t(i % C::kXSlots) * C::kXBytes; };

  // After the barrier every warpgroup is done with tile j - 1's weights and tile j - 2's X (its wgmma was waited
  // for before it): at a run's first tile the previous run's slot takes run + kDWS - 1, and X(j - 2)'s slot takes
  // X(j + kDX - 1). Then wait for tile j.
  auto arrive = [&](int j) {
    __syncthreads();
    if (j > 0) {
      if (j % C::kWT == 0 && (j / C::kWT + C::kDWS - 1) * C::kWT < n_kt) load_w(j / C::kWT + C::kDWS - 1);
      if (j + C::kDX - 1 < n_kt) load_x(j + C::kDX - 1);
    }
    if (j % C::kWT == 0) mbar_wait(w_bar(j / C::kWT), (j / C::kWT / C::kWSlots) & 1);
    mbar_wait(x_bar(j), (j / C::kXSlots) & 1);
  };
  // A fragments of both k-steps of tile j ([k-step][A register]).
  auto dequant_tile = [&](int j, uint32_t(&a)[2][4]) {
    const int run = j / C::kWT;
    const uint32_t st = smem_base + C::kWOffset + uint32_t(run % C::kWSlots) * C::kWSlotBytes;
    const uint4 w = lds128(st + warp * (C::kWT * kTileBytes) + (j % C::kWT) * kTileBytes + lane * 16);
    uint32_t mw = 0;
    if constexpr (kGroup) {
      // The lane's group: K 16t of the tile (group 32 puts lanes t = 0, 1 and t = 2, 3 in different groups).
      const int grp = ((kt_of(j) * kTileK + 16 * t) >> p.group_shift) - first_group(run);
      mw = lds32(st + C::kWMetaOffset + warp * C::kRunMetaBytes + grp * kMetaBytes + g * 4);
    }
    tile_fragments<kGroup>(w, mw, a);
  };
  // Issues (does not wait for) the tile's two k-steps: chunks 2s, 2s + 1 of its X tile (32 bytes of permuted K).
  auto mma_tile = [&](uint32_t st, const uint32_t(&a)[2][4]) {  // st: the tile's X slot
    fence_operands(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgmma_rs<kTok>(d, a[0], w8a8::interleave_desc(st, 128, 512));
    wgmma_rs<kTok>(d, a[1], w8a8::interleave_desc(st + 256, 128, 512));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };
  auto mma_wait = [&] {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(d);
  };

  // Two A register sets in turn (unrolled by two so that each is a fixed set of registers: a wgmma reads its A
  // registers until it completes).
  uint32_t a0[2][4], a1[2][4];
  if (n_kt > 0) {
    arrive(0);
    dequant_tile(0, a0);
  }
  for (int i = 0; i < n_kt; i += 2) {
    mma_tile(x_addr(i), a0);
    if (i + 1 < n_kt) {
      arrive(i + 1);
      dequant_tile(i + 1, a1);
    }
    mma_wait();
    if (i + 1 >= n_kt) break;
    mma_tile(x_addr(i + 1), a1);
    if (i + 2 < n_kt) {
      arrive(i + 2);
      dequant_tile(i + 2, a0);
    }
    mma_wait();
  }

  // Register 4j + i: channel 16 (nb0 + warp) + g + 8 (i >> 1), token tok0 + 8j + 2t + (i & 1) (PTX ISA, wgmma D
  // fragment; as the mma kernel's fragment (b, mt = j, i)).
  constexpr int kChunks = kTok / 8;
  if (gridDim.z > 1) {
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
    if (!split_k_arrive(p.tickets, ticket, s_last)) return;
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

  // Epilogue: the mma kernel's arithmetic and operand staging (w4a8_kernel.cuh).
  const TokenOperands<kTok, kGroup> top(p, tok0, smem);
  const int ch0 = (nb0 + warp) * kTileN + g;
  ChannelOperands cop[2];
  cop[0].load(p, ch0, kGroup);
  cop[1].load(p, ch0 + 8, kGroup);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (ch0 + 8 * h >= p.n) continue;
#pragma unroll
    for (int j = 0; j < kChunks; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tt = 8 * j + 2 * t + e;  // token in the tile
        if (tok0 + tt >= p.m) continue;
        store_output<kGroup>(p, tok0 + tt, ch0 + 8 * h, int32_t(d[4 * j + 2 * h + e]), top.sx[tt],
                             kGroup ? 0 : top.rsum[tt], cop[h]);
      }
  }
#endif
}

template <int kTok, bool kGroup>
Status prepare() {
  static std::atomic<uint32_t> done_mask{0};
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  const uint32_t bit = 1u << (dev & 31);
  if (!(done_mask.load(std::memory_order_acquire) & bit)) {
    QDEC_CUDA_RETURN(cudaFuncSetAttribute(w4a8_wgmma_kernel<kTok, kGroup>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          WgConfig<kTok>::kSmemBytes));
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
  QDEC_RETURN_IF_ERROR((prepare<kTok, kGroup>()));
  QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, w4a8_wgmma_kernel<kTok, kGroup>, kThreads,
                                                                 WgConfig<kTok>::kSmemBytes));
  cache.store(std::max(*blocks, 1), std::memory_order_release);
  return Status::Ok();
}

template <int kTok, bool kGroup>
Status launch(const KernelParams& kp, dim3 grid, uint8_t* x_perm, cudaStream_t stream) {
  QDEC_RETURN_IF_ERROR((prepare<kTok, kGroup>()));
  const long long padded = static_cast<long long>((kp.m + kTok - 1) / kTok) * kTok;
  const long long items = padded * kp.k_tiles;
  permute_x_kernel<<<unsigned((items + 255) / 256), 256, 0, stream>>>(kp.xq, kp.ldq, kp.m, kTok, kp.k_tiles, padded,
                                                                      x_perm);
  QDEC_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "w4a8 permute_x_kernel launch"));
  KernelParams kq = kp;
  kq.xq = reinterpret_cast<const int8_t*>(x_perm);
  w4a8_wgmma_kernel<kTok, kGroup><<<grid, kThreads, WgConfig<kTok>::kSmemBytes, stream>>>(kq);
  return cuda_status(cudaGetLastError(), "w4a8_wgmma_kernel launch");
}

Status bad_tokens(int tokens) {
  return Status(StatusCode::kInvalidArgument,
                "w4a8: wgmma token tile " + std::to_string(tokens) + " is not one of 64, 128, 256");
}

}  // namespace

Status wgmma_kernel_supported() {
  DeviceInfo dev;
  QDEC_RETURN_IF_ERROR(current_device_info(&dev));
  if (dev.cc_major != 9 || dev.cc_minor != 0)
    return Status(StatusCode::kUnsupported, "w4a8: the wgmma paths need an sm_90 device (this one is sm_" +
                                                std::to_string(dev.cc_major) + std::to_string(dev.cc_minor) + ")");
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  static int binary_version = 0;
  std::call_once(once, [] {
    cudaFuncAttributes attr{};
    attr_err = cudaFuncGetAttributes(&attr, w4a8_wgmma_kernel<64, true>);
    binary_version = attr.binaryVersion;
  });
  QDEC_CUDA_RETURN(attr_err);
  if (binary_version != 90)
    return Status(StatusCode::kUnsupported, "w4a8: the wgmma paths need sm_90a code, which this build lacks (binary " +
                                                std::to_string(binary_version) + ")");
  return Status::Ok();
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

Status wgmma_kernel_launch(int tokens, bool group, const KernelParams& kp, dim3 grid, uint8_t* x_perm,
                           cudaStream_t stream) {
  switch (tokens) {
    case 64:
      return group ? launch<64, true>(kp, grid, x_perm, stream) : launch<64, false>(kp, grid, x_perm, stream);
    case 128:
      return group ? launch<128, true>(kp, grid, x_perm, stream) : launch<128, false>(kp, grid, x_perm, stream);
    case 256:
      return group ? launch<256, true>(kp, grid, x_perm, stream) : launch<256, false>(kp, grid, x_perm, stream);
  }
  return bad_tokens(tokens);
}

}  // namespace qdec::w4a8
