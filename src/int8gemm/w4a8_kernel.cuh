// W4A8 GEMM kernel (QServe's QoQ weights on INT8 tensor cores): Y[M, N] = epilogue(Xq[M, K] . W8[N, K]^T).
//
//   W   prepacked tiles of 16 channels x 64 K, 512 bytes, lane-fragment order (w4a8_layout.h, docs/formats.md)
//   X   [M, ldq] int8 per token, fp32 scales [M] (and int32 row sums [M] for qoq-c)
//   Y   [M, ldy] bf16 / fp16 / fp32
//
// Design
// - Transposed product Y^T = W X^T: the weight is the A operand of mma.m16n8k32 (16 channels), the tokens the
//   n = 8 side, so one prepacked layout serves decode (8 tokens per warp tile) and prefill (32 per warp tile).
// - The prepack stores a lane's A fragments of both k-steps of a 64-K tile in its 16 bytes, at their natural K
//   positions, so X is read as the caller stores it: one ldmatrix.x4 per 8-token tile gives each lane its B
//   fragments of both k-steps (word t of each 16-byte chunk of its token's 64 bytes). The chunks of a token row sit
//   in shared memory at chunk ^ ((token >> 1) & 3) (the TMA's 64-byte swizzle): conflict-free for ldmatrix.
// - UINT4 -> INT8 in registers, four lanes of a 32-bit word at once: (w & 0x0F0F0F0F) * s1 puts q * s1 (<= 255)
//   in each byte without carries, + (0x80808080 - z*s1 * 0x01010101) subtracts the zero term with a +128 bias
//   that keeps every byte in 0..255 (the protective range guarantees (q - z) * s1 fits in int8), ^ 0x80808080
//   removes the bias: QServe's multiply-then-subtract, 3.5 instructions per 4 weights. qoq-c feeds the raw
//   nibbles (0..15, valid int8) and subtracts z * row_sum in the epilogue.
// - Everything stays int32 until the epilogue (s1 and z are integers), so split-K partial sums add exactly
//   (each split stores its int32 fragments into scratch; the last CTA of a tile, by ticket, adds them up).
// - CTA = 8 warps = 128 channels x kTokens tokens; a kStages-deep cp.async pipeline stages W, X and group meta per
//   64-K tile. In private mode the weights carry an L2 evict-first hint when one token tile covers M.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "int8gemm/w4a8_layout.h"
#include "runtime/ptx.cuh"

namespace qdec::w4a8 {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kCtaBlocks = 8;  // 16-channel blocks per CTA (128 channels)

struct KernelParams {
  const uint8_t* codes;
  const uint8_t* meta;     // qoq-g group meta, null for qoq-c
  const uint16_t* scales;  // [n_pad] fp16 bits
  const uint8_t* zeros;    // [n_pad] qoq-c zeros
  const int8_t* xq;
  long long ldq;
  const float* sx;
  const int32_t* row_sum;  // qoq-c
  const float* bias;       // nullable
  void* y;
  long long ldy;
  int y_dtype;  // GemmDType
  int m, n, n_blocks, n_pad, k_tiles, group_size, num_groups;
  int group_shift;  // log2(group_size) (32, 64, 128)
  int kt_per_split;
  int evict_first;    // weights read by one CTA only: stream them past L2
  int4* partials;     // split-K fragments, [tile][split][CB * MT][kThreads] (gridDim.z > 1; scratch)
  unsigned* tickets;  // [gridDim.y][gridDim.x], zero between calls (gridDim.z > 1)
};

// A configuration: WC channel warps x (8 / WC) token warps; each warp owns CB 16-channel blocks and MT 8-token
// tiles.
// Two staging modes. Private (one token warp, M <= 32): every lane copies exactly the bytes it later reads (its 16
// weight bytes, its MT 16-byte X pieces, its 4-byte group-meta word), so each thread waits only for its own
// cp.async groups and no barrier couples the warps: a slow DRAM request stalls one warp, not the CTA. Shared
// (prefill tiles): W, X and meta of a 64-K tile are staged once per CTA and read by several warps, one
// __syncthreads per tile.
template <int WC_, int CB_, int MT_>
struct Config {
  static constexpr int WC = WC_;  // warps along the channels
  static constexpr int CB = CB_;  // 16-channel blocks per warp
  static constexpr int MT = MT_;  // 8-token tiles per warp
  static constexpr int WT = kWarps / WC;
  static constexpr int kTokens = WT * MT * 8;
  static constexpr bool kPrivate = WT == 1 && MT <= 4;
  // Private: per warp W 512 | X MT x 512 | meta 32 lanes x 4. Shared: W 8 x 512 | X kTokens x 64 | meta 8 x 64.
  static constexpr int kWarpBytes = kTileBytes * (1 + MT) + 128;
  static constexpr int kWBytes = kCtaBlocks * kTileBytes;
  static constexpr int kXBytes = kTokens * kTileK;
  static constexpr int kStageBytes = kPrivate ? kWarps * kWarpBytes : kWBytes + kXBytes + kCtaBlocks * 64;
  // Deep enough for ~30 KB+ of weights in flight per SM at the occupancy each size allows.
  static constexpr int kStages = kPrivate ? (MT == 1 ? 8 : MT == 2 ? 6 : 5) : (kTokens <= 64 ? 8 : 6);
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kMinBlocks = kTokens >= 128 ? 2 : 1;  // register cap: two 128-token CTAs per SM
  static_assert(WC * CB == kCtaBlocks, "a CTA covers 8 channel blocks");
};

// ---- PTX helpers ---------------------------------------------------------------------------------------------
// An L2 evict-first policy for weights read once (private mode, one token tile: no CTA re-reads them).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async16_hint(uint32_t smem, const void* gmem, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async16_ca(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4_ca(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem) : "memory");
}
// kBytes (4, 8 or 16) global -> shared, or zeros where !valid (src-size 0: nothing is read from gmem).
template <int kBytes>
__device__ __forceinline__ void cp_async_ca_zfill(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem), "l"(gmem), "n"(kBytes),
               "r"(valid ? kBytes : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
using ptx::lds128;
// Four 8 x 8 b16 matrices (rows of 16 bytes): lane 8m + i gives the address of row i of matrix m; lane 4g + t
// receives word t of row g of each matrix.
__device__ __forceinline__ uint4 ldmatrix_x4(uint32_t addr) {
  uint4 v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}
// Byte offset of 16-byte chunk c (0..3) of row r in 64-byte rows, swizzled as the TMA's 64-byte mode writes them.
__host__ __device__ constexpr int x_chunk_offset(int r, int c) {
  return r * kTileK + ((c ^ ((r >> 1) & 3)) << 4);
}
using ptx::lds32;

// D (16x8 int32) += A (16x32, row) * B (32x8, col), int8. qoq-c feeds its raw codes 0..15, which are int8 too.
__device__ __forceinline__ void mma_k32(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A warp's A fragments of both k-steps of a 64-K tile ([k-step][A register]) from its lane's 16 code bytes w (word
// 2s + h: k-step s, channel g + 8h; low nibbles the first A register of the pair, high nibbles the second). qoq-g
// dequantizes k-step s with the meta word mw_s (s1 and z * s1 of channels g and g + 8; dequant4): the same word for
// groups of 64 and 128, the tile's two groups for 32. qoq-c takes the raw codes (0..15 are int8). Shared by the mma
// and the wgmma kernels, whose per-warp A fragments are the same.
template <bool kGroup>
__device__ __forceinline__ void tile_fragments(uint4 w, uint32_t mw0, uint32_t mw1, uint32_t (&a)[2][4]) {
  if constexpr (kGroup) {
    const uint32_t s0_lo = mw0 & 0xFF, s0_hi = (mw0 >> 16) & 0xFF;
    const uint32_t b0_lo = dequant_bias((mw0 >> 8) & 0xFF), b0_hi = dequant_bias(mw0 >> 24);
    const uint32_t s1_lo = mw1 & 0xFF, s1_hi = (mw1 >> 16) & 0xFF;
    const uint32_t b1_lo = dequant_bias((mw1 >> 8) & 0xFF), b1_hi = dequant_bias(mw1 >> 24);
    a[0][0] = dequant4(w.x & 0x0F0F0F0Fu, s0_lo, b0_lo);
    a[0][2] = dequant4((w.x >> 4) & 0x0F0F0F0Fu, s0_lo, b0_lo);
    a[0][1] = dequant4(w.y & 0x0F0F0F0Fu, s0_hi, b0_hi);
    a[0][3] = dequant4((w.y >> 4) & 0x0F0F0F0Fu, s0_hi, b0_hi);
    a[1][0] = dequant4(w.z & 0x0F0F0F0Fu, s1_lo, b1_lo);
    a[1][2] = dequant4((w.z >> 4) & 0x0F0F0F0Fu, s1_lo, b1_lo);
    a[1][1] = dequant4(w.w & 0x0F0F0F0Fu, s1_hi, b1_hi);
    a[1][3] = dequant4((w.w >> 4) & 0x0F0F0F0Fu, s1_hi, b1_hi);
  } else {
    a[0][0] = w.x & 0x0F0F0F0Fu;
    a[0][2] = (w.x >> 4) & 0x0F0F0F0Fu;
    a[0][1] = w.y & 0x0F0F0F0Fu;
    a[0][3] = (w.y >> 4) & 0x0F0F0F0Fu;
    a[1][0] = w.z & 0x0F0F0F0Fu;
    a[1][2] = (w.z >> 4) & 0x0F0F0F0Fu;
    a[1][1] = w.w & 0x0F0F0F0Fu;
    a[1][3] = (w.w >> 4) & 0x0F0F0F0Fu;
  }
}

__device__ __forceinline__ void store_y(void* y, int dtype, size_t idx, float v) {
  if (dtype == 0) {
    static_cast<__nv_bfloat16*>(y)[idx] = __float2bfloat16_rn(v);
  } else if (dtype == 1) {
    static_cast<__half*>(y)[idx] = __float2half_rn(v);
  } else {
    static_cast<float*>(y)[idx] = v;
  }
}

// Split-K arrival, after the CTA stored its partials: its tile's ticket counts it, and the result says whether it is
// the tile's last CTA, which then sees every split's partials. All threads of the CTA call it; flag is a shared int.
// Used by the mma and the wgmma kernels.
__device__ __forceinline__ bool split_k_arrive(unsigned* tickets, unsigned ticket, int* flag) {
  return ptx::split_arrive(tickets + ticket, gridDim.z, threadIdx.x == 0, flag, [] { __syncthreads(); });
}

// ---- The kernel ------------------------------------------------------------------------------------------------
// grid: x = 128-channel CTA columns, y = kTokens token tiles, z = K splits (kt_per_split 64-K tiles each).
// kG32 (qoq-g with group 32 only): the tile's two k-steps lie in different groups, so each takes its own meta word.
template <class C, bool kGroup, bool kG32 = false>
__global__ void __launch_bounds__(kThreads, C::kMinBlocks) w4a8_kernel(const __grid_constant__ KernelParams p) {
  extern __shared__ __align__(128) uint8_t smem[];  // no static __shared__ in this kernel (see the ticket)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int warp_c = warp % C::WC, warp_t = warp / C::WC;
  const int nb0 = blockIdx.x * kCtaBlocks;
  const int tok0 = blockIdx.y * C::kTokens;
  const int kt_begin = blockIdx.z * p.kt_per_split;
  const int kt_end = min(p.k_tiles, kt_begin + p.kt_per_split);
  const int n_kt = kt_end - kt_begin;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint64_t policy = evict_first_policy();
  const bool evict_first = p.evict_first != 0;

  // Per-thread copy assignments, fixed over the K loop. Blocks past N read the last block (never stored), token
  // rows past M read row M - 1 (never stored): every load stays inside the buffers.
  const int w_nb = min(nb0 + (tid >> 5), p.n_blocks - 1);
  const uint8_t* w_src = p.codes + size_t(w_nb) * p.k_tiles * kTileBytes + lane * 16;
  const int meta_chunks = p.group_size >= 64 ? 2 : 4;  // 16-byte chunks of meta per block and tile
  const int m_blk = tid / meta_chunks, m_chunk = tid % meta_chunks;
  const uint8_t* m_src = nullptr;
  if constexpr (kGroup) {
    if (m_blk < kCtaBlocks)
      m_src = p.meta + size_t(min(nb0 + m_blk, p.n_blocks - 1)) * p.num_groups * kMetaBytes + m_chunk * 16;
  }

  // Private mode: the lane's X pieces (chunk t of token g of each 8-token tile, stored swizzled: x_chunk_offset) and
  // group-meta word (the group of k-step t >> 1: lanes 4g and 4g + 2 then hold both of a group-32 tile's words).
  const uint8_t* x_src[C::MT];
#pragma unroll
  for (int mt = 0; mt < C::MT; ++mt)
    x_src[mt] = reinterpret_cast<const uint8_t*>(p.xq) + size_t(min(tok0 + mt * 8 + g, p.m - 1)) * p.ldq + t * 16;
  int x_dst = x_chunk_offset(g, t);
  const uint8_t* lane_meta = nullptr;
  if constexpr (kGroup) lane_meta = p.meta + size_t(w_nb) * p.num_groups * kMetaBytes + g * 4;
  // Shared mode: the X pieces this thread stages (fixed rows), so a stage costs a few instructions per copy.
  constexpr int kXCopies = C::kPrivate ? 1 : (C::kTokens * 4 + kThreads - 1) / kThreads;
  const uint8_t* xs_src[kXCopies];
  int xs_dst[kXCopies];
#pragma unroll
  for (int j = 0; j < kXCopies; ++j) {
    const int i = tid + j * kThreads;
    xs_src[j] = reinterpret_cast<const uint8_t*>(p.xq) + size_t(min(tok0 + (i >> 2), p.m - 1)) * p.ldq + (i & 3) * 16;
    xs_dst[j] = C::kWBytes + x_chunk_offset(i >> 2, i & 3);
  }
  // Private mode: keep the lane's copy addresses in registers. Without this the compiler recomputed them inside the
  // main loop (~30 more instructions per tile, the loop no longer unrolled; t8 at qoq-g128 up to 14% slower, SASS in
  // session 22).
  if constexpr (C::kPrivate) {
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt) asm volatile("" : "+l"(x_src[mt]));
    asm volatile("" : "+r"(x_dst), "+l"(w_src), "+l"(lane_meta));
  }

  auto load_stage = [&](int stage, int kt) {
    const uint32_t st = smem_base + stage * C::kStageBytes;
    if constexpr (C::kPrivate) {
      const uint32_t wst = st + warp * C::kWarpBytes;
      if (evict_first) {
        cp_async16_hint(wst + lane * 16, w_src + size_t(kt) * kTileBytes, policy);
      } else {
        cp_async16(wst + lane * 16, w_src + size_t(kt) * kTileBytes);
      }
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt) cp_async16_ca(wst + (1 + mt) * kTileBytes + x_dst, x_src[mt] + kt * kTileK);
      if constexpr (kGroup)
        cp_async4_ca(wst + (1 + C::MT) * kTileBytes + lane * 4,
                     lane_meta + size_t((kt * kTileK + (t >> 1) * 32) >> p.group_shift) * kMetaBytes);
    } else {
      // No cache hint here: the hinted copy faulted (illegal instruction) in this mode on the H200; prefill tiles
      // re-read each weight tile from L2 anyway.
      cp_async16(st + tid * 16, w_src + size_t(kt) * kTileBytes);
#pragma unroll
      for (int j = 0; j < kXCopies; ++j)
        if ((C::kTokens * 4) % kThreads == 0 || tid + j * kThreads < C::kTokens * 4)
          cp_async16(st + xs_dst[j], xs_src[j] + kt * kTileK);
      if constexpr (kGroup) {
        if (m_src)
          cp_async16(st + C::kWBytes + C::kXBytes + m_blk * 64 + m_chunk * 16,
                     m_src + size_t((kt * kTileK) >> p.group_shift) * kMetaBytes);
      }
    }
  };

  int acc[C::CB][C::MT][4];
#pragma unroll
  for (int b = 0; b < C::CB; ++b)
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[b][mt][i] = 0;

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < n_kt) load_stage(s, kt_begin + s);
    cp_async_commit();
  }
  // The meta word of k-step 0: private, the lane's own copy (group 32: lane 4g's); shared, the tile's first group.
  // Group 32 only: k-step 1's is 8 bytes (private: lane 4g + 2's copy) or one group (shared) further.
  const int meta_off = C::kPrivate ? warp * C::kWarpBytes + (1 + C::MT) * kTileBytes + (kG32 ? g * 16 : lane * 4)
                                   : C::kWBytes + C::kXBytes + g * 4;
  constexpr int kMetaStep1 = C::kPrivate ? 8 : kMetaBytes;
  const int w_off = C::kPrivate ? warp * C::kWarpBytes + lane * 16 : lane * 16;
  // ldmatrix rows: lane 8m + i addresses chunk m of token i of the 8-token tile.
  const int x_off = (C::kPrivate ? warp * C::kWarpBytes + kTileBytes : C::kWBytes + warp_t * C::MT * 8 * kTileK) +
                    x_chunk_offset(lane & 7, lane >> 3);
  constexpr int kXTileStride = 8 * kTileK;  // between 8-token tiles (private: one 512-byte tile each)
  static_assert(!C::kPrivate || kXTileStride == kTileBytes, "private X tiles are 512 bytes");

  for (int i = 0; i < n_kt; ++i) {
    cp_async_wait<C::kStages - 2>();
    // The lanes read each other's X and meta copies (ldmatrix), and the next load_stage overwrites the stage that
    // the whole warp (private) or CTA (shared) read in the previous iteration.
    if constexpr (C::kPrivate) {
      __syncwarp();
    } else {
      __syncthreads();
    }
    {
      const int next = i + C::kStages - 1;
      if (next < n_kt) load_stage(next % C::kStages, kt_begin + next);
      cp_async_commit();
    }
    const uint32_t st = smem_base + (i % C::kStages) * C::kStageBytes;
    uint4 xb[C::MT];
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt) xb[mt] = ldmatrix_x4(st + x_off + mt * kXTileStride);
#pragma unroll
    for (int b = 0; b < C::CB; ++b) {
      const int blk = warp_c * C::CB + b;
      // Private mode: the warp's only block lives in its own region.
      const uint4 w = lds128(st + w_off + (C::kPrivate ? 0 : blk * kTileBytes));
      uint32_t a[2][4];  // [k-step][A register]
      // With one meta word for both k-steps the compiler shares their dequantization constants.
      if constexpr (kGroup) {
        const uint32_t ma = st + meta_off + (C::kPrivate ? 0 : blk * 64);
        const uint32_t mw0 = lds32(ma);
        tile_fragments<kGroup>(w, mw0, kG32 ? lds32(ma + kMetaStep1) : mw0, a);
      } else {
        tile_fragments<kGroup>(w, 0, 0, a);
      }
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt) {
        mma_k32(acc[b][mt], a[0][0], a[0][1], a[0][2], a[0][3], xb[mt].x, xb[mt].y);
        mma_k32(acc[b][mt], a[1][0], a[1][1], a[1][2], a[1][3], xb[mt].z, xb[mt].w);
      }
    }
  }
  cp_async_wait<0>();

  // Fragment (b, mt, i): channel 16 * (nb0 + blk) + g + 8 * (i >> 1), token tok0 + 8 * tile + 2t + (i & 1).
  // The epilogue's operands of this thread's channels and tokens. The private configurations (M <= 32) load them all
  // into registers here, before the split-K exchange and any store, so that their latency overlaps it and is paid
  // once (loads between the stores are ordered after them: Y may alias them as far as the compiler knows); the shared
  // ones, short of registers, load them between the stores as before.
  constexpr bool kHoist = C::kPrivate;
  struct ChanOps {
    float s_w = 0.0f, bias = 0.0f;
    int z = 0;
  };
  auto chan_ops = [&](int b, int h) {
    ChanOps o;
    const int nb = nb0 + warp_c * C::CB + b, ch = nb * kTileN + g + 8 * h;
    if (nb < p.n_blocks && ch < p.n) {
      o.s_w = __half2float(__ushort_as_half(p.scales[ch]));
      o.bias = p.bias ? p.bias[ch] : 0.0f;
      if constexpr (!kGroup) o.z = p.zeros[ch];
    }
    return o;
  };
  auto tok_of = [&](int mt, int e) { return tok0 + (warp_t * C::MT + mt) * 8 + 2 * t + e; };
  ChanOps hch[kHoist ? C::CB : 1][2];
  float hsx[kHoist ? C::MT : 1][2];
  int hrs[kHoist ? C::MT : 1][2];
  if constexpr (kHoist) {
#pragma unroll
    for (int b = 0; b < C::CB; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) hch[b][h] = chan_ops(b, h);
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = min(tok_of(mt, e), p.m - 1);  // tokens past M: never stored
        hsx[mt][e] = p.sx[tok];
        hrs[mt][e] = kGroup ? 0 : p.row_sum[tok];
      }
  }
  if (gridDim.z > 1) {
    // Split-K: every CTA stores its fragments (4 int32 per thread, token tile and channel block) as one 16-byte
    // plain store each into its own slot of the partials; the last CTA of the tile (by ticket) adds the other
    // splits' slots to its registers. Integer sums are exact, so the order of arrival does not change the result.
    // Only fragments with a valid first token are stored and read (the pair's second token may lie past M: its
    // value is never used), so the traffic follows M, not the tile's token count.
    // The flag lives in the (idle) staging buffers: a static __shared__ variable would shift the dynamic shared
    // memory by 16 bytes, and with it every cp.async destination (measured on the weight-only GEMM, docs/gemm.md
    // v12: two L2 sectors per 16-byte copy).
    int* s_last = reinterpret_cast<int*>(smem);
    const unsigned ticket = blockIdx.y * gridDim.x + blockIdx.x;
    constexpr int kFrags = C::CB * C::MT;
    // Slot layout: [tile][split][fragment][thread] int4, so that a warp's stores and loads are contiguous.
    auto slot = [&](int split, int f) {
      return p.partials + ((size_t(ticket) * gridDim.z + split) * kFrags + f) * kThreads + tid;
    };
    // The one predicate both the stores and the last CTA's loads use: the fragment's first token is < M.
    auto stored = [&](int mt) { return tok0 + (warp_t * C::MT + mt) * 8 + 2 * t < p.m; };
#pragma unroll
    for (int b = 0; b < C::CB; ++b)
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
        if (stored(mt))
          __stcg(slot(blockIdx.z, b * C::MT + mt),
                 make_int4(acc[b][mt][0], acc[b][mt][1], acc[b][mt][2], acc[b][mt][3]));
    if (!split_k_arrive(p.tickets, ticket, s_last)) return;
    for (int z = 0; z < int(gridDim.z); ++z) {
      if (z == int(blockIdx.z)) continue;
#pragma unroll
      for (int b = 0; b < C::CB; ++b)
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt)
          if (stored(mt)) {
            const int4 v = __ldcg(slot(z, b * C::MT + mt));
            acc[b][mt][0] += v.x;
            acc[b][mt][1] += v.y;
            acc[b][mt][2] += v.z;
            acc[b][mt][3] += v.w;
          }
    }
    if (tid == 0) p.tickets[ticket] = 0;
  }

  // Epilogue: int32 -> fp32 once, scales, bias, store.
#pragma unroll
  for (int b = 0; b < C::CB; ++b) {
    const int nb = nb0 + warp_c * C::CB + b;
    if (nb >= p.n_blocks) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ch = nb * kTileN + g + 8 * h;
      if (ch >= p.n) continue;
      ChanOps o;
      if constexpr (kHoist) {
        o = hch[b][h];
      } else {
        o = chan_ops(b, h);
      }
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tok = tok_of(mt, e);
          if (tok >= p.m) continue;
          float sx;
          int rs = 0;
          if constexpr (kHoist) {
            sx = hsx[mt][e];
            rs = hrs[mt][e];
          } else {
            sx = p.sx[tok];
            if constexpr (!kGroup) rs = p.row_sum[tok];
          }
          int32_t v = acc[b][mt][2 * h + e];
          if constexpr (!kGroup) v -= o.z * rs;
          const float y = __fmaf_rn(static_cast<float>(v), sx * o.s_w, o.bias);
          store_y(p.y, p.y_dtype, size_t(tok) * p.ldy + ch, y);
        }
    }
  }
}

}  // namespace qdec::w4a8
