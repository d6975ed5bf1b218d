// Fused weight-only GEMM for small M (M <= 64): Y[M, N] = act(X[M, K] . dequant(W)[N, K]^T + bias).
//
//   W codes  tiles of 16 rows x 64 (int4) / 32 (int8) K values, 512 bytes each, in A-fragment order
//            (docs/formats.md, "Weight formats"): tile (nt, c) at ((nt * k_pad / chunk) + c) * 512
//   W meta   [num_groups][n_pad] entries: int4 fp16 (scale, offset | zero point), int8 fp16 scale
//   X        [M, ldx] bf16 / fp16;   Y  [M, ldy] bf16 / fp16 / fp32
//
// Design
// - Transposed product Y^T = W X^T, so the weight is the A operand of mma.m16n8k16 (m = 16 output channels) and
//   the tokens are the n = 8 side: M <= 8 wastes nothing, M <= 64 takes MT = 1, 2, 4, 8 token tiles.
// - One CTA = 8 warps = 128 output channels x one K slice (split-K, sized so that every SM is busy). Each warp
//   streams its own 16 channels: one 16-byte cp.async per lane per 512-byte tile with an L2 evict-first policy
//   (every weight byte is read once, so it should not displace X or the split-K partials in L2), into a
//   per-warp ring of kDepth shared-memory stages (one cp.async group per tile; a stage is refilled with the tile
//   kDepth ahead as soon as its tile has been read out), so that every warp keeps kDepth - 1 .. kDepth tiles in
//   flight without spending registers on them (QDEC_FUSED_SMEM_RING 0: a register ring of ld.global.nc loads).
// - B fragments by ldmatrix.x4 (two k-steps per instruction); two accumulator sets (even / odd k-steps) for
//   M <= 16; group boundaries are handled per tile, so the inner loop carries no per-k-step bookkeeping.
// - The CTA's X slice is staged once in shared memory (rows padded by 16 bytes: conflict-free B fragments),
//   with the per-(token, group) sums of X and the slice's scales.
// - Dequantization in registers computes on exact codes, never on scaled values: int4 by one AND+OR into the
//   mantissa of a magic number (fp16 1024 + q, or 1024 + 16q for the rows g+8 so that one shift serves
//   two registers; bf16 128 + q), int8 by a byte permute into fp16 1024 + (q + 128) or an exact bf16 q.
//   Each scale group accumulates in its own registers; at the end of a group the fp32 accumulators take
//   s * acc_group + (o - magic * s) * sum_group(X): the scale, the offset and the magic number cost one FMA
//   pair per group, not per weight.
// - Split-K: each CTA adds its fp32 sums into an L2-resident accumulator with float2 atomics; the last CTA of a
//   column block (an atomic ticket) applies bias and clamp, writes Y and zeroes the accumulator and its ticket
//   for the next call (the summation order, and so the last bits, vary from run to run).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/ptx.cuh"

namespace qdec::wq {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockN = kWarps * 16;  // output channels per CTA
constexpr int kXPadHalves = 8;        // 16 bytes of padding per staged X row

struct FusedParams {
  const uint8_t* codes;
  const uint8_t* meta;
  const void* x;
  void* y;
  const float* bias;  // nullable
  float* partial;     // [n_pad][MT * 8] fp32 split-K accumulator, zero between calls (num_splits > 1)
  unsigned* tickets;  // [n_blocks], zero between calls (num_splits > 1)
  long long ldx;
  long long ldy;
  int m, n, k, n_pad, k_pad;
  int group_k;     // K values per scale group; per channel: a value > k_pad (one segment per slice)
  int num_groups;  // meta groups per row
  int kc;          // K values per split (a multiple of the chunk and of group_k when group_k <= 128)
  int num_splits;
  int act;         // Activation
  int y_dtype;     // GemmDType
  int zero_point;  // int4: second meta half is a zero point (w = (q - z) s) instead of an offset
  int x_vec;       // X rows can be read with 16-byte loads (K % 8 == 0, ldx % 8 == 0, X 16-byte aligned)
};

// Build-time tuning knobs (defaults measured best on the H200, docs/gemm.md): resident CTAs per SM the kernel is
// compiled for (its register cap; the split planner fills that many) and the weight ring depth, for M <= 8 (MT 1)
// and M <= 16 (MT 2).
#ifndef QDEC_FUSED_SMEM_RING  // 1: the weight ring is cp.async stages in shared memory; 0: registers
#define QDEC_FUSED_SMEM_RING 1
#endif
#ifndef QDEC_FUSED_MT1_BLOCKS
#define QDEC_FUSED_MT1_BLOCKS 4
#endif
#ifndef QDEC_FUSED_MT1_DEPTH
#define QDEC_FUSED_MT1_DEPTH 8
#endif
#ifndef QDEC_FUSED_MT2_BLOCKS
#define QDEC_FUSED_MT2_BLOCKS 3
#endif
#ifndef QDEC_FUSED_MT2_DEPTH
#define QDEC_FUSED_MT2_DEPTH 4
#endif
__host__ __device__ constexpr int fused_min_blocks(int mt) {
  return mt == 1 ? QDEC_FUSED_MT1_BLOCKS : mt == 2 ? QDEC_FUSED_MT2_BLOCKS : mt == 4 ? 2 : 1;
}
__host__ __device__ constexpr int fused_depth(int mt) {
  return mt == 1 ? QDEC_FUSED_MT1_DEPTH : mt == 2 ? QDEC_FUSED_MT2_DEPTH : 4;
}

// Dynamic shared memory of a launch: X slice, scale slice, group sums.
// Weight ring (kDepth stages x 8 warps x 512 bytes), X slice (at MT = 1 only min(M, 8) rows are staged), scale
// slice, group sums.
__host__ __device__ constexpr int fused_x_rows(int mt, int m) {
  return mt == 1 ? (m < 8 ? m : 8) : mt * 8;
}
__host__ __device__ constexpr int fused_smem_bytes(int mt, int m, int kc, int n_seg, int meta_entry) {
  return QDEC_FUSED_SMEM_RING * fused_depth(mt) * kWarps * 512 + fused_x_rows(mt, m) * (kc + kXPadHalves) * 2 +
         n_seg * kBlockN * meta_entry + mt * 8 * n_seg * 4 + 16;
}

// ---- Register helpers -------------------------------------------------------------------------------------
using ptx::cp_async16;
using ptx::mma16816;
using ptx::prmt;

// (a & b) | c in one instruction (the compiler emits AND + OR when both constants are immediates).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// (a & b) ^ c in one instruction.
__device__ __forceinline__ uint32_t and_xor(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}


// Four 8x8 b16 matrices from shared memory (row addresses from lanes 0-7, 8-15, 16-23, 24-31): with X rows as
// the matrix rows, register i of lane (g, t) is X[g][k_i + 2t .. 2t + 1], i.e. the B fragments b0, b1 of two
// k-steps when k_i = k, k + 8, k + 16, k + 24.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// 16-byte global -> shared copy with an L2 cache policy (the weights: evict-first).
__device__ __forceinline__ void cp_async16_hint(uint32_t smem, const void* gmem, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(addr));
  return r;
}

// An L2 policy that marks lines evict-first (the weights are read once).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}


// 16-byte streaming load (the register ring): read-only path, no L1 allocation, L2 evict-first. volatile keeps
// it where it is written (ahead of later MMAs).
__device__ __forceinline__ uint4 ld_stream(const void* ptr, uint64_t policy) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(ptr), "l"(policy));
  return r;
}

// Format constants. v is the value the MMA sees; w = s_row * v + (o - kMagic * s_row) with s_row = s for rows
// g and s * kHiRowScale for rows g + 8.
template <int BITS, bool BF16>
struct Dequant {
  static constexpr int kChunkK = BITS == 4 ? 64 : 32;  // K values per 512-byte tile
  static constexpr int kKSteps = kChunkK / 16;         // mma k-steps per tile
  static constexpr float kMagic = BITS == 4 ? (BF16 ? 128.f : 1024.f) : (BF16 ? 0.f : 1152.f);
  static constexpr float kHiRowScale = (BITS == 4 && !BF16) ? 1.f / 16.f : 1.f;
  static constexpr int kMetaEntry = BITS == 4 ? 4 : 2;

  // The A registers of k-step `s` of a tile whose lane data is `v`.
  static __device__ __forceinline__ void frag(const uint4& v, int s, uint32_t (&a)[4]) {
    if constexpr (BITS == 4) {
      const uint32_t w = s == 0 ? v.x : s == 1 ? v.y : s == 2 ? v.z : v.w;
      if constexpr (!BF16) {
        // fp16 1024 + q: the nibble in the low mantissa bits; rows g+8 keep theirs at bits 4..7 (1024 + 16q).
        const uint32_t w8 = w >> 8;
        a[0] = and_or(w, 0x000F000Fu, 0x64006400u);
        a[1] = and_or(w, 0x00F000F0u, 0x64006400u);
        a[2] = and_or(w8, 0x000F000Fu, 0x64006400u);
        a[3] = and_or(w8, 0x00F000F0u, 0x64006400u);
      } else {
        // bf16 has 7 mantissa bits: 128 + q, one shift per register.
        a[0] = and_or(w, 0x000F000Fu, 0x43004300u);
        a[1] = and_or(w >> 4, 0x000F000Fu, 0x43004300u);
        a[2] = and_or(w >> 8, 0x000F000Fu, 0x43004300u);
        a[3] = and_or(w >> 12, 0x000F000Fu, 0x43004300u);
      }
    } else {
      const uint32_t w0 = s == 0 ? v.x : v.z, w1 = s == 0 ? v.y : v.w;
      if constexpr (!BF16) {
        // Codes are stored as u = q + 128: fp16 1024 + u = 1152 + q, one permute per register.
        a[0] = prmt(w0, 0x64646464u, 0x4140);
        a[1] = prmt(w0, 0x64646464u, 0x4342);
        a[2] = prmt(w1, 0x64646464u, 0x4140);
        a[3] = prmt(w1, 0x64646464u, 0x4342);
      } else {
        // bf16 cannot hold 128 + u exactly for u >= 128: build 128 + (u & 127) and subtract 256 - 128 * bit7(u)
        // (256 when q < 0, 128 when q >= 0): exact q.
        const uint32_t t[4] = {prmt(w0, 0u, 0x4140), prmt(w0, 0u, 0x4342), prmt(w1, 0u, 0x4140), prmt(w1, 0u, 0x4342)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t hv = and_or(t[i], 0x007F007Fu, 0x43004300u);
          const uint32_t hc = and_xor(t[i], 0x00800080u, 0x43804380u);
          __nv_bfloat162 r =
              __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&hv), *reinterpret_cast<const __nv_bfloat162*>(&hc));
          a[i] = *reinterpret_cast<uint32_t*>(&r);
        }
      }
    }
  }
};

__device__ __forceinline__ float apply_act(float v, int act) {
  if (act == 1) return v < 0.f ? 0.f : v;
  if (act == 2) return v < 0.f ? 0.f : (v > 6.f ? 6.f : v);
  return v;
}

__device__ __forceinline__ void store_y(void* y, long long idx, float v, int y_dtype) {
  if (y_dtype == 0) {
    static_cast<__nv_bfloat16*>(y)[idx] = __float2bfloat16_rn(v);
  } else if (y_dtype == 1) {
    static_cast<__half*>(y)[idx] = __float2half_rn(v);
  } else {
    static_cast<float*>(y)[idx] = v;
  }
}

// BITS: 4 (int4 and int4-zp) or 8 (int8). BF16: X (and the MMA) in bf16, else fp16. MT: token tiles of 8.
// kDepth: weight tiles in flight per warp, through a shared-memory ring of cp.async stages (tile c + kDepth is
// requested as soon as tile c is consumed, so kDepth - 1 .. kDepth tiles are always outstanding, without the
// registers a register ring would need).
template <int BITS, bool BF16, int MT>
__global__ void __launch_bounds__(kThreads, fused_min_blocks(MT)) fused_gemm_kernel(const __grid_constant__ FusedParams p) {
  using D = Dequant<BITS, BF16>;
  constexpr int kDepth = fused_depth(MT);
  // Two accumulator sets (even / odd k-steps) halve the dependent-MMA chain where registers allow.
  constexpr bool kTwoSets = MT <= 2;
  constexpr int kRows = MT * 8;
  extern __shared__ __align__(16) uint8_t smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int nb = blockIdx.x, split = blockIdx.y;
  const int k0 = split * p.kc;
  const int k1 = min(k0 + p.kc, p.k_pad);
  const int slice = k1 - k0;
  const int n_seg = p.group_k >= p.k_pad ? 1 : (slice + p.group_k - 1) / p.group_k;
  const int xs_stride = p.kc + kXPadHalves;

  const int xrows = min(p.m, kRows);
  const uint32_t ring_sh = static_cast<uint32_t>(__cvta_generic_to_shared(smem));  // [kDepth][kWarps][512 B]
  constexpr bool kSmemRing = QDEC_FUSED_SMEM_RING != 0;
  uint16_t* x_sh = reinterpret_cast<uint16_t*>(smem + (kSmemRing ? kDepth * kWarps * 512 : 0));
  uint8_t* meta_sh = reinterpret_cast<uint8_t*>(x_sh) + fused_x_rows(MT, p.m) * xs_stride * 2;
  float* xsum_sh = reinterpret_cast<float*>(meta_sh + n_seg * kBlockN * D::kMetaEntry);
  __shared__ int is_last_sh;

  const int nt = nb * kWarps + warp;  // this warp's 16-row tile
  const bool active = nt * 16 < p.n_pad;
  const int chunks_per_row = p.k_pad / D::kChunkK;
  const int c_begin = k0 / D::kChunkK;
  const int nch = slice / D::kChunkK;
  const uint8_t* w_gl = p.codes + (static_cast<size_t>(nt) * chunks_per_row + c_begin) * 512 + lane * 16;
  const uint64_t policy = evict_first_policy();

  // This lane's 16 bytes of ring stage u.
  const uint32_t ring_lane = ring_sh + static_cast<uint32_t>((warp * 512) + lane * 16);
  auto ring_addr = [&](int u) { return ring_lane + static_cast<uint32_t>(u * kWarps * 512); };
  uint4 ring[kSmemRing ? 1 : kDepth];  // the register ring (QDEC_FUSED_SMEM_RING 0)
  if constexpr (!kSmemRing) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      if (active && u < nch) ring[u] = ld_stream(w_gl + static_cast<size_t>(u) * 512, policy);
    }
  }

  // ---- Stage X[0 .. rows) x [k0, k1) (zeros past K), the slice's meta, then the group sums. Token rows >= M
  // only feed MMA output columns that are never stored: at MT = 1 they are not staged at all (their ldmatrix
  // rows read row M - 1), above they are zero-filled; their group sums are never written (reads clamp).
  {
    const int zrows = MT == 1 ? xrows : kRows;
    // Every global read of the staging is a cp.async, so that all of them are in flight at once (a load +
    // shared store loop waits out one memory latency per iteration).
    const uint16_t* x_gl = static_cast<const uint16_t*>(p.x);
    if (p.x_vec) {
      const int vecs = slice / 8;
      for (int r = 0; r < zrows; ++r) {
        for (int v = threadIdx.x; v < vecs; v += kThreads) {
          const int c = v * 8, kk = k0 + c;
          uint16_t* dst = x_sh + r * xs_stride + c;
          if (r < xrows && kk < p.k) {
            cp_async16(dst, x_gl + r * p.ldx + kk);
          } else {
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
          }
        }
      }
    } else {
      for (int r = 0; r < zrows; ++r) {
        for (int c = threadIdx.x; c < slice; c += kThreads) {
          const int kk = k0 + c;
          x_sh[r * xs_stride + c] = (r < xrows && kk < p.k) ? x_gl[r * p.ldx + kk] : uint16_t{0};
        }
      }
    }
    // Meta: per segment, the CTA's 128 rows are contiguous (group-major layout): 16-byte pieces of 4 (int4) or
    // 8 (int8) rows; pieces past n_pad or past the last group are zero.
    const int g_first = p.group_k >= p.k_pad ? 0 : k0 / p.group_k;
    constexpr int kPieceRows = 16 / D::kMetaEntry;
    constexpr int kPieces = kBlockN / kPieceRows;
    for (int i = threadIdx.x; i < n_seg * kPieces; i += kThreads) {
      const int seg = i / kPieces, row = nb * kBlockN + (i % kPieces) * kPieceRows, grp = g_first + seg;
      uint8_t* dst = meta_sh + static_cast<size_t>(i) * 16;
      if (row < p.n_pad && grp < p.num_groups) {
        cp_async16(dst, p.meta + (static_cast<size_t>(grp) * p.n_pad + row) * D::kMetaEntry);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    cp_async_commit();  // group: the staging
    // The first kDepth weight tiles, one cp.async group each (empty groups past the slice keep the count), so
    // that their latency overlaps the staging; the staging group is older and completes first.
    if constexpr (kSmemRing) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        if (active && u < nch) cp_async16_hint(ring_addr(u), w_gl + static_cast<size_t>(u) * 512, policy);
        cp_async_commit();
      }
      cp_async_wait_group<kDepth>();
    } else {
      cp_async_wait_all();
    }
    __syncthreads();
    // Group sums of X: one warp per (token < M, segment).
    const int seg_len = p.group_k >= p.k_pad ? slice : p.group_k;
    for (int r = 0; r < xrows; ++r) {
      const uint16_t* xr = x_sh + r * xs_stride;
      for (int sg = warp; sg < n_seg; sg += kWarps) {
        const int c0 = sg * seg_len, c1 = min(slice, c0 + seg_len);
        float s = 0.f;
        for (int c = c0 + 2 * lane; c < c1; c += 64) {
          const uint32_t two = *reinterpret_cast<const uint32_t*>(xr + c);
          if constexpr (BF16) {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&two));
            s += f.x + f.y;
          } else {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&two));
            s += f.x + f.y;
          }
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
        if (lane == 0) xsum_sh[r * n_seg + sg] = s;
      }
    }
    __syncthreads();
  }

  float acc[MT][4], g0[MT][4], g1[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = g0[j][i] = g1[j][i] = 0.f;

  // Group boundaries at tile granularity: a group is tiles_per_group whole tiles, or (int4 g32) half a tile.
  const bool half_tile_groups = p.group_k < D::kChunkK;
  const int tiles_per_group = p.group_k >= p.k_pad ? (1 << 30) : max(1, p.group_k / D::kChunkK);
  int seg = 0, tiles_in_seg = 0;
  const int lrow0 = warp * 16 + g;  // CTA-local rows of this lane's accumulators: lrow0 and lrow0 + 8

  auto flush = [&]() {
    float s0, s1, o0, o1;
    if constexpr (D::kMetaEntry == 4) {
      const __half2 m0 = reinterpret_cast<const __half2*>(meta_sh)[seg * kBlockN + lrow0];
      const __half2 m1 = reinterpret_cast<const __half2*>(meta_sh)[seg * kBlockN + lrow0 + 8];
      s0 = __low2float(m0);
      s1 = __low2float(m1);
      o0 = p.zero_point ? -__high2float(m0) * s0 : __high2float(m0);
      o1 = p.zero_point ? -__high2float(m1) * s1 : __high2float(m1);
    } else {
      s0 = __half2float(reinterpret_cast<const __half*>(meta_sh)[seg * kBlockN + lrow0]);
      s1 = __half2float(reinterpret_cast<const __half*>(meta_sh)[seg * kBlockN + lrow0 + 8]);
      o0 = o1 = 0.f;
    }
    const float se0 = s0, se1 = s1 * D::kHiRowScale;
    const float oe0 = o0 - D::kMagic * se0, oe1 = o1 - D::kMagic * se1;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const float xa = xsum_sh[min(j * 8 + 2 * t, xrows - 1) * n_seg + seg];
      const float xb = xsum_sh[min(j * 8 + 2 * t + 1, xrows - 1) * n_seg + seg];
      // acc += s * (g0 + g1) + o * sum(X), as an FMA chain.
      const float sc[4] = {se0, se0, se1, se1}, oc[4] = {oe0, oe0, oe1, oe1}, xc[4] = {xa, xb, xa, xb};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float a = fmaf(oc[i], xc[i], acc[j][i]);
        a = fmaf(sc[i], g0[j][i], a);
        if constexpr (kTwoSets) a = fmaf(sc[i], g1[j][i], a);
        acc[j][i] = a;
        g0[j][i] = g1[j][i] = 0.f;
      }
    }
    ++seg;
  };

  // B fragments by ldmatrix: lane l addresses X row (l % 8) of each token tile at k offset 8 * (l / 8), so one
  // ldmatrix.x4 yields b0, b1 of two consecutive k-steps. Rows are 16-byte padded: conflict-free.
  const int lrow = MT == 1 ? min(lane & 7, xrows - 1) : (lane & 7);
  const uint32_t xb_lane = static_cast<uint32_t>(__cvta_generic_to_shared(x_sh)) +
                           static_cast<uint32_t>((lrow * xs_stride + 8 * (lane >> 3)) * 2);
  // kHalf (int4 g32): a group is two k-steps, flushed inside the tile; else groups are whole tiles.
  auto compute_tile = [&](const uint4& v, int c, auto half_tag) {
    constexpr bool kHalf = decltype(half_tag)::value;
    const uint32_t xa = xb_lane + static_cast<uint32_t>(c * D::kChunkK * 2);
#pragma unroll
    for (int h = 0; h < D::kKSteps / 2; ++h) {
      uint32_t a0[4], a1[4];
      D::frag(v, 2 * h, a0);
      D::frag(v, 2 * h + 1, a1);
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        uint32_t b[4];
        ldmatrix_x4(b, xa + static_cast<uint32_t>((j * 8 * xs_stride + h * 32) * 2));
        mma16816<BF16>(g0[j], a0, b[0], b[1]);
        if constexpr (kTwoSets) {
          mma16816<BF16>(g1[j], a1, b[2], b[3]);
        } else {
          mma16816<BF16>(g0[j], a1, b[2], b[3]);
        }
      }
      if constexpr (kHalf) flush();
    }
    if constexpr (!kHalf) {
      if (++tiles_in_seg == tiles_per_group) {
        flush();
        tiles_in_seg = 0;
      }
    }
  };
  // Two copies of the main loop, so that neither carries the other's group bookkeeping.
  // Tile c sits in ring stage c % kDepth: wait for its group (kDepth - 1 younger ones may stay in flight),
  // read it, compute, refill the stage with tile c + kDepth (every lane reads only the 16 bytes it copied itself,
  // so no barrier is needed), commit one group per tile.
  auto main_loop = [&](auto half_tag) {
    const uint8_t* wp = w_gl + kDepth * 512;  // the tile kDepth ahead
    for (int c0 = 0; c0 < nch; c0 += kDepth) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int c = c0 + u;
        if (c < nch) {
          if constexpr (kSmemRing) {
            cp_async_wait_group<kDepth - 1>();
            const uint4 v = lds128(ring_addr(u));
            compute_tile(v, c, half_tag);
            if (c + kDepth < nch) cp_async16_hint(ring_addr(u), wp, policy);
            cp_async_commit();
          } else {
            compute_tile(ring[u], c, half_tag);
            if (c + kDepth < nch) ring[u] = ld_stream(wp, policy);
          }
          wp += 512;
        }
      }
    }
  };

  if (active) {
    if (half_tile_groups) {
      main_loop(std::true_type{});
    } else {
      main_loop(std::false_type{});
    }
    if (tiles_in_seg > 0) flush();
  }

  // ---- Epilogue.
  if (p.num_splits == 1) {
    if (!active) return;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int n = nt * 16 + g + 8 * (i >> 1), m = j * 8 + 2 * t + (i & 1);
        if (m < p.m && n < p.n) {
          const float v = apply_act(acc[j][i] + (p.bias ? p.bias[n] : 0.f), p.act);
          store_y(p.y, static_cast<long long>(m) * p.ldy + n, v, p.y_dtype);
        }
      }
    }
    return;
  }
  // Split-K: add this slice's sums into the fp32 accumulator [n_pad][kRows] (float2 atomics, L2), then the
  // last CTA of the column block (ticket) finishes it and leaves the accumulator zero for the next call.
  if (active) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int m = j * 8 + 2 * t;
      if (m < p.m) {
        float* a0 = p.partial + static_cast<size_t>(nt * 16 + g) * kRows + m;
        atomicAdd(reinterpret_cast<float2*>(a0), make_float2(acc[j][0], acc[j][1]));
        atomicAdd(reinterpret_cast<float2*>(a0 + 8 * kRows), make_float2(acc[j][2], acc[j][3]));
      }
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ticket = atomicAdd(p.tickets + nb, 1u);
    is_last_sh = ticket == static_cast<unsigned>(p.num_splits - 1);
  }
  __syncthreads();
  if (!is_last_sh) return;
  __threadfence();
  for (int i = threadIdx.x; i < p.m * kBlockN; i += kThreads) {
    const int m = i / kBlockN, n = nb * kBlockN + i % kBlockN;
    if (n >= p.n_pad) continue;
    float* a = p.partial + static_cast<size_t>(n) * kRows + m;
    const float v = __ldcg(a);
    __stcg(a, 0.f);
    if (n < p.n)
      store_y(p.y, static_cast<long long>(m) * p.ldy + n, apply_act(v + (p.bias ? p.bias[n] : 0.f), p.act), p.y_dtype);
  }
  if (threadIdx.x == 0) p.tickets[nb] = 0;  // ready for the next call
}

// Instantiation list entry (one per kernel in gemm_w4.cu / gemm_w8.cu).
struct FusedKernelInfo {
  int bits;
  bool bf16;
  int mt;
  const void* func;
};
// The compiled list of each translation unit.
struct FusedKernelList {
  const FusedKernelInfo* begin_;
  const FusedKernelInfo* end_;
  const FusedKernelInfo* begin() const { return begin_; }
  const FusedKernelInfo* end() const { return end_; }
};
FusedKernelList fused_kernels_w4();
FusedKernelList fused_kernels_w8();

}  // namespace qdec::wq
