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
// - One CTA = 8 warps = (8 / P) blocks of 16 output channels x P parts of one K slice (v12: P = 1, 2, 4, 8;
//   the parts' sums are added in shared memory at the end), with split-K over K slices on top; the host
//   planner picks P and the split count from a cost estimate fitted to measurements (gemm.cu, docs/gemm.md).
//   Each warp streams its own 16 channels of its part: one 16-byte cp.async per lane per 512-byte tile with an
//   L2 evict-first policy (every weight byte is read once, so it should not displace X or the split-K partials
//   in L2), into a per-warp ring of kStages shared-memory stages (one cp.async group per tile; a stage is
//   refilled with the tile kStages ahead as soon as its tile has been read out), so that every warp keeps
//   kStages - 1 .. kStages tiles in flight without spending registers on them. kStages is one unrolled block of
//   kDepth = 4 tiles, or two for the deep ring (int8 at M <= 8 with long slices, session 35: there the warps wait
//   on memory, and 8 tiles in flight per warp stream closer to the read ceiling on the H200).
// - Every instruction per 512-byte tile costs issue slots, so the main loop is unrolled over whole ring blocks
//   with the scale-group ends at fixed positions: the first MMA of a group overwrites the group accumulators
//   (no zeroing), a group flush is one 16-byte shared load of fp32 scale and offset (converted once per CTA in
//   the prologue, the magic number and the zero point folded in) plus two FMAs per accumulator; B fragments by
//   ldmatrix.x4 (two k-steps each).
// - The CTA's X slice is staged once in shared memory (rows padded by 16 bytes: conflict-free B fragments).
//   The per-(token, group) sums of X the flush needs come, at MT <= 2, from one more MMA per k-step (A = ones)
//   on the B fragments the weights' MMAs load anyway (v12; before, and still at MT >= 4, a prologue pass over the
//   whole slice, whose cost grew with the slice and held every warp before its first tile).
// - Dequantization in registers computes on exact codes, never on scaled values: int4 by one AND+OR into the
//   mantissa of a magic number (fp16 1024 + q, or 1024 + 16q for the rows g+8 so that one shift serves
//   two registers; bf16 128 + q), int8 by a byte permute into fp16 1024 + (q + 128) or an exact bf16 q.
//   Each scale group accumulates in its own registers; at the end of a group the fp32 accumulators take
//   s * acc_group + (o - magic * s) * sum_group(X): the scale, the offset and the magic number cost one FMA
//   pair per group, not per weight.
// - Programmatic dependent launch (opt-in, p.pdl): meta and the first weight tiles are requested before
//   griddepcontrol.wait, X / Y / the workspace only after it, so a chain of calls overlaps ramp-up and drain.
// - Split-K: each CTA adds its fp32 sums into an L2-resident accumulator with float2 reductions; the last CTA of a
//   column block (an acquire-release ticket, taken by one thread after a barrier) applies bias and clamp,
//   writes Y and zeroes the accumulator and its ticket for the next call (the summation order, and so the last
//   bits, vary from run to run).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "gemm/fused_timeline.h"
#include "runtime/cuda_check.h"
#include "runtime/probe_timeline.cuh"
#include "runtime/ptx.cuh"

namespace qdec::wq {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockN = kWarps * 16;  // output channels per CTA
constexpr int kXPadHalves = 8;        // 16 bytes of padding per staged X row

// QDEC_FUSED_TIMELINE (probe builds only, CMake option of that name, default off): lane 0 of every warp records its
// phase boundaries (fused_timeline.h: entry, SM, prologue done, main loop done, exit; %globaltimer ns) into its
// translation unit's g_fused_timeline, read by `bench_gemm --timeline`. Off, the stamps compile to nothing.
#ifndef QDEC_FUSED_TIMELINE
#define QDEC_FUSED_TIMELINE 0
#endif
#if QDEC_FUSED_TIMELINE
static __device__ unsigned long long g_fused_timeline[kFusedTlWarps * kFusedTlSlots];
#endif
__device__ __forceinline__ void fused_stamp([[maybe_unused]] int slot) {
#if QDEC_FUSED_TIMELINE
  if (threadIdx.x % 32 != 0) return;
  const int w = (blockIdx.y * gridDim.x + blockIdx.x) * kWarps + threadIdx.x / 32;
  if (w >= kFusedTlWarps) return;
  g_fused_timeline[w * kFusedTlSlots + slot] = probe::stamp_value(slot == kFusedTlSm);
#endif
}
// The host side of fused_timeline_w4 / _w8 (fused_timeline.h), over this translation unit's table.
[[maybe_unused]] static Status fused_timeline_io([[maybe_unused]] bool reset,
                                                 [[maybe_unused]] std::vector<unsigned long long>* out) {
#if QDEC_FUSED_TIMELINE
  return probe::table_io(g_fused_timeline, size_t(kFusedTlWarps) * kFusedTlSlots, reset, out);
#else
  return Status(StatusCode::kUnsupported,
                "fused_timeline: the library was built without QDEC_FUSED_TIMELINE (CMake -DQDEC_FUSED_TIMELINE=ON)");
#endif
}
// Stamps the exit of a warp wherever the kernel returns.
struct FusedStampAtExit {
  __device__ ~FusedStampAtExit() { fused_stamp(kFusedTlExit); }
};

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
  int parts;       // K parts per CTA (1, 2, 4, 8; MT <= 4 only): the CTA covers 8 / parts 16-row blocks
  int act;         // Activation
  int y_dtype;     // GemmDType
  int zero_point;  // int4: second meta half is a zero point (w = (q - z) s) instead of an offset
  int x_vec;       // X rows can be read with 16-byte loads (K % 8 == 0, ldx % 8 == 0, X 16-byte aligned)
  int x_ring;      // X streamed through two shared-memory slots of fused_ring_k() K values (MT <= 2, one part,
                   // x_vec), refilled one ring block ahead; else the whole K slice is staged in the prologue
  int pdl;         // launched as a programmatic dependent: W and meta are requested before the previous kernel of
                   // the stream has finished, X, Y and the workspace are touched only after it has
};

// Build-time tuning knobs (defaults measured best on the H200, docs/gemm.md): resident CTAs per SM the kernel is
// compiled for (its register cap; the split planner fills that many) and the weight ring depth (tiles in flight
// per warp), for M <= 8 (MT 1) and M <= 16 (MT 2).
#ifndef QDEC_FUSED_MT1_BLOCKS
#define QDEC_FUSED_MT1_BLOCKS 4
#endif
#ifndef QDEC_FUSED_MT1_DEPTH
#define QDEC_FUSED_MT1_DEPTH 4
#endif
#ifndef QDEC_FUSED_MT2_BLOCKS
#define QDEC_FUSED_MT2_BLOCKS 2
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
// The deep ring (session 35): int8 weights at M <= 8 also compile a ring of kDeepRingBlocks blocks of fused_depth()
// tiles (8 tiles in flight per warp; the main loop's unrolled block stays fused_depth() tiles, so its code does not
// grow), which the planner takes for slices of at least kDeepRingMinTiles tiles per warp (gemm.cu). With the X
// ring, X is then staged kDeepRingBlocks blocks ahead in kDeepRingBlocks + 1 slots.
constexpr int kDeepRingBlocks = 2;
__host__ __device__ constexpr bool fused_deep_ring_supported(int bits, int mt) {
  return bits == 8 && mt == 1;
}

// Dynamic shared memory of a launch: weight ring (ring_blocks x kDepth stages x 8 warps x 512 bytes; reused for the
// parts' reduction), X (the whole K slice, or ring_blocks + 1 ring slots of fused_ring_k K values; at MT = 1 only
// min(M, 8) rows), the slice's fp16 meta (4 bytes per segment and row) and, at MT >= 4, the X sums. cta_rows: output
// channels per CTA (128 / parts).
__host__ __device__ constexpr int fused_x_rows(int mt, int m) {
  return mt == 1 ? (m < 8 ? m : 8) : mt * 8;
}
// K values per X ring slot: one ring block of kDepth weight tiles (chunk_k: 64 for int4, 32 for int8).
__host__ __device__ constexpr int fused_ring_k(int mt, int chunk_k) {
  return fused_depth(mt) * chunk_k;
}
__host__ __device__ constexpr bool fused_ring_supported(int mt) {
  return mt <= 2;
}
// X sums per (group, token): from the main loop's B fragments at MT <= 2, else by a prologue pass over the
// staged slice (partials of up to max(n_seg, 8) tasks, then the reduced n_seg rows in shared memory).
__host__ __device__ constexpr bool fused_loop_sums(int mt) {
  return mt <= 2;
}
__host__ __device__ constexpr int fused_xsum_tasks(int n_seg) {
  return n_seg < 8 ? 8 : n_seg;
}
// ring_k: K values per X ring slot, 0 = the whole slice of kc staged. With the ring, each of a CTA's K parts
// (kBlockN / cta_rows) has its own block in each of the ring_blocks + 1 slots.
// ring_blocks: blocks of fused_depth() weight tiles in the ring (1, or kDeepRingBlocks).
__host__ __device__ constexpr int fused_smem_bytes(int mt, int m, int kc, int n_seg, int cta_rows, int ring_k,
                                                   int ring_blocks = 1) {
  return ring_blocks * fused_depth(mt) * kWarps * 512 +
         fused_x_rows(mt, m) *
             (ring_k > 0 ? (ring_blocks + 1) * (kBlockN / cta_rows) * (ring_k + kXPadHalves) : kc + kXPadHalves) * 2 +
         n_seg * cta_rows * 4 + (fused_loop_sums(mt) ? 0 : (fused_xsum_tasks(n_seg) + n_seg) * mt * 8 * 4);
}
// The X ring with several K parts per CTA needs every part of every slice to hold the same number of tiles, so
// that all warps take the ring's block barriers together: slice_tiles split into whole groups of tpg tiles, the
// same count per part, none shorter.
__host__ __device__ constexpr bool fused_ring_parts_even(int slice_tiles, int tpg, int parts) {
  return parts == 1 || ((slice_tiles + tpg - 1) / tpg + parts - 1) / parts * tpg * parts == slice_tiles;
}
// The parts' reduction reuses the weight ring: 8 warps x 32 lanes x MT * 4 fp32 sums.
__host__ __device__ constexpr bool fused_parts_supported(int mt) {
  return kWarps * 32 * mt * 4 * 4 <= fused_depth(mt) * kWarps * 512;
}
// Shared memory one SM offers its CTAs (H100 / H200: 228 KiB) and what the runtime reserves per CTA.
constexpr int kSmemPerSm = 228 * 1024;
constexpr int kSmemReservedPerCta = 1024;

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
// QDEC_FUSED_EVICT_FIRST=0 drops the hint (a build-time experiment knob).
#ifndef QDEC_FUSED_EVICT_FIRST
#define QDEC_FUSED_EVICT_FIRST 1
#endif
__device__ __forceinline__ void cp_async16_hint(uint32_t smem, const void* gmem, uint64_t policy) {
#if QDEC_FUSED_EVICT_FIRST
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "l"(policy)
               : "memory");
#else
  (void)policy;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// cp.async.wait_group with a count known only after unrolling (the switch folds away).
__device__ __forceinline__ void cp_async_wait_pending(int n) {
  switch (n) {
    case 0:
      cp_async_wait_group<0>();
      break;
    case 1:
      cp_async_wait_group<1>();
      break;
    case 2:
      cp_async_wait_group<2>();
      break;
    case 3:
      cp_async_wait_group<3>();
      break;
    case 4:
      cp_async_wait_group<4>();
      break;
    case 5:
      cp_async_wait_group<5>();
      break;
    case 6:
      cp_async_wait_group<6>();
      break;
    case 7:
      cp_async_wait_group<7>();
      break;
    case 8:
      cp_async_wait_group<8>();
      break;
    case 9:
      cp_async_wait_group<9>();
      break;
    case 10:
      cp_async_wait_group<10>();
      break;
    case 11:
      cp_async_wait_group<11>();
      break;
    case 12:
      cp_async_wait_group<12>();
      break;
    case 13:
      cp_async_wait_group<13>();
      break;
    case 14:
      cp_async_wait_group<14>();
      break;
    default:
      cp_async_wait_all();
      break;
  }
}
using ptx::lds128;

// An L2 policy that marks lines evict-first (the weights are read once).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
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

// D (16x8 fp32) = A (16x16) * B (16x8) + (kZero ? 0 : D). kZero starts a scale group without zeroing its
// accumulators first (the C operand is the constant 0).
template <bool BF16, bool kZero>
__device__ __forceinline__ void mma_acc(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (!kZero) {
    mma16816<BF16>(d, a, b0, b1);
  } else if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
  }
}

// BITS: 4 (int4 and int4-zp) or 8 (int8). BF16: X (and the MMA) in bf16, else fp16. MT: token tiles of 8.
// RB: ring blocks. kStages = RB x kDepth weight tiles in flight per warp, through a shared-memory ring of cp.async
// stages (tile c + kStages is requested as soon as tile c is consumed, so kStages - 1 .. kStages tiles are always
// outstanding, without the registers a register ring would need).
template <int BITS, bool BF16, int MT, int RB = 1>
__global__ void __launch_bounds__(kThreads, fused_min_blocks(MT))
    fused_gemm_kernel(const __grid_constant__ FusedParams p) {
  using D = Dequant<BITS, BF16>;
  constexpr int kDepth = fused_depth(MT);        // tiles per unrolled ring block
  constexpr int kRingBlocks = RB;                // ring blocks in flight
  constexpr int kStages = kDepth * kRingBlocks;  // ring stages: tiles in flight per warp
  constexpr int kXSlots = kRingBlocks + 1;       // X ring slots
  constexpr int kRows = MT * 8;
  // int8 with bf16 X dequantizes to the exact code (no magic number, no offset): its flush needs no X sums (v13;
  // before, a quarter to a half of its MMAs summed X for a term multiplied by zero).
  constexpr bool kSums = !(BITS == 8 && BF16);
  constexpr bool kLoopSums = kSums && fused_loop_sums(MT);
  extern __shared__ __align__(128) uint8_t smem[];  // no static __shared__ in this kernel (see the ticket)
  fused_stamp(kFusedTlEntry);
  fused_stamp(kFusedTlSm);
  [[maybe_unused]] FusedStampAtExit stamp_exit;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int nb = blockIdx.x, split = blockIdx.y;
  // Warp -> (16-row block rb of the CTA's rbs, K part of the CTA's p.parts).
  const int rbs = kWarps / p.parts;
  const int rb = warp % rbs, part = warp / rbs;
  const int cta_rows = rbs * 16;
  const int k0 = split * p.kc;
  const int k1 = min(k0 + p.kc, p.k_pad);
  const int slice = k1 - k0;
  const bool per_channel = p.group_k >= p.k_pad;
  // The parts cover whole groups (per channel: whole tiles) of the slice, the same count each but the last.
  const int nch_slice = slice / D::kChunkK;
  const int tpg = per_channel || p.group_k < D::kChunkK ? 1 : p.group_k / D::kChunkK;
  const int part_tiles = ((nch_slice + tpg - 1) / tpg + p.parts - 1) / p.parts * tpg;
  const int pc0 = min(part * part_tiles, nch_slice);
  const int nch = min(pc0 + part_tiles, nch_slice) - pc0;  // this warp's tiles (0 for a part past the slice)
  // Scale segments: groups, or per channel one per part (the offset term needs the X sum of each part).
  const int seg_len = per_channel ? part_tiles * D::kChunkK : p.group_k;
  const int n_seg = (slice + seg_len - 1) / seg_len;
  const int seg0 = pc0 * D::kChunkK / seg_len;  // this part's first segment
  // X in shared memory: the whole slice (row stride kc + pad), or two ring slots of kRingK (p.x_ring), each
  // holding one block per K part (the planner gives every part the same tile count, fused_ring_parts_even).
  constexpr int kRingK = fused_ring_k(MT, D::kChunkK);
  const bool x_ring = fused_ring_supported(MT) && p.x_ring;
  const int xs_stride = (x_ring ? kRingK : p.kc) + kXPadHalves;
  const int xpart_halves = fused_x_rows(MT, p.m) * xs_stride;      // one part's block of a ring slot
  const int xslot_halves = (x_ring ? p.parts : 1) * xpart_halves;  // one ring slot (or the staged slice)

  const int xrows = min(p.m, kRows);
  const uint32_t ring_sh = static_cast<uint32_t>(__cvta_generic_to_shared(smem));  // [kStages][kWarps][512 B]
  uint16_t* x_sh = reinterpret_cast<uint16_t*>(smem + kStages * kWarps * 512);
  uint8_t* meta16_sh = reinterpret_cast<uint8_t*>(x_sh + (x_ring ? kXSlots : 1) * xslot_halves);  // [n_seg][cta_rows]
  float* xpart_sh = reinterpret_cast<float*>(meta16_sh + n_seg * cta_rows * 4);  // MT >= 4: [tasks][kRows]
  float* xsum_sh = xpart_sh + fused_xsum_tasks(n_seg) * kRows;                   // MT >= 4: [n_seg][kRows]
  const float* xsum = xpart_sh;  // MT >= 4: [n_seg][kRows] sums of X per (segment, token)

  // Under PDL, the next kernel of the stream may be scheduled as this grid's CTAs leave (it waits for this one
  // before touching its outputs: ptx::griddep_wait).
  if (p.pdl) ptx::griddep_launch_dependents();
  const int nt = nb * rbs + rb;  // this warp's 16-row tile
  const bool active = nt * 16 < p.n_pad;
  const int chunks_per_row = p.k_pad / D::kChunkK;
  const int c_begin = k0 / D::kChunkK + pc0;
  const uint8_t* w_gl = p.codes + (static_cast<size_t>(nt) * chunks_per_row + c_begin) * 512 + lane * 16;
  const uint64_t policy = evict_first_policy();

  // This lane's 16 bytes of ring stage u.
  const uint32_t ring_lane = ring_sh + static_cast<uint32_t>((warp * 512) + lane * 16);
  auto ring_addr = [&](int u) { return ring_lane + static_cast<uint32_t>(u * kWarps * 512); };

  // B fragments by ldmatrix: lane l addresses X row (l % 8) of each token tile at k offset 8 * (l / 8), so one
  // ldmatrix.x4 yields b0, b1 of two consecutive k-steps. Rows are 16-byte padded: conflict-free. At MT = 1
  // token rows >= M read row M - 1 (their MMA columns are never stored).
  const int lrow = MT == 1 ? min(lane & 7, xrows - 1) : (lane & 7);
  const uint32_t xb_lane = static_cast<uint32_t>(__cvta_generic_to_shared(x_sh)) +
                           static_cast<uint32_t>((lrow * xs_stride + 8 * (lane >> 3)) * 2);
  const uint32_t xj_stride = static_cast<uint32_t>(8 * xs_stride * 2);  // bytes between token tiles
  // This warp's X in slot 0 of the ring (its part's block), or at its part's first column of the staged slice.
  const uint32_t xw_lane = xb_lane + static_cast<uint32_t>(x_ring ? part * xpart_halves * 2 : pc0 * D::kChunkK * 2);

  // X ring (p.x_ring): slot b % kXSlots takes, for each part pp, X[0 .. xrows) x [k0 + pp * part_k + b * kRingK,
  // + kRingK) of ring block b (zeros past K), by 16-byte cp.async of the whole CTA (x_vec holds); the rows past M
  // of the MMA's token tiles (MT = 2) are zeroed once in the prologue.
  const uint16_t* x_gl = static_cast<const uint16_t*>(p.x);
  // Each thread copies the same (row, column) pieces of every block: their addresses are computed once (v13b;
  // a loop over the pieces with its index arithmetic in every block was ~20% of the instructions at M = 16).
  constexpr int kVecs = kRingK / 8;                                   // 16-byte pieces per X row of a block
  constexpr int kPieces = (kRows * kVecs + kThreads - 1) / kThreads;  // per thread and block, at most
  const uint16_t* xsrc[kPieces];                                      // X at the piece in block 0's columns
  uint32_t xdst[kPieces];                                             // byte offset in a slot, ~0u: none
#pragma unroll
  for (int q = 0; q < kPieces; ++q) {
    const int i = threadIdx.x + q * kThreads, r = i / kVecs, c = (i % kVecs) * 8;
    xsrc[q] = x_gl + r * p.ldx + c;
    xdst[q] = x_ring && i < xrows * kVecs ? static_cast<uint32_t>((r * xs_stride + c) * 2) : ~0u;
  }
  // Block b of every part: part pp's block starts pp * part_tiles tiles into the slice (each thread copies the
  // same pieces of every part's block). One part is its own branch, the code it had before parts took the ring
  // (with the loop for every ring the bench took 1.000-1.012x the time, geometric mean per format and card:
  // docs/results/gemm_ring_parts_branch_s27.txt).
  const int part_k = part_tiles * D::kChunkK;
  auto stage_x_part = [&](int b, int pp) {
    const int kb = k0 + pp * part_k + b * kRingK;
    const int xslot = kXSlots == 2 ? (b & 1) : static_cast<int>(static_cast<unsigned>(b) % kXSlots);
    uint8_t* slot = reinterpret_cast<uint8_t*>(x_sh + xslot * xslot_halves + pp * xpart_halves);
    const bool whole = kb + kRingK <= p.k;  // no piece of the block past K (all but a last block)
#pragma unroll
    for (int q = 0; q < kPieces; ++q) {
      if (xdst[q] == ~0u) continue;
      if (whole || kb + ((threadIdx.x + q * kThreads) % kVecs) * 8 < p.k) {
        cp_async16(slot + xdst[q], xsrc[q] + kb);
      } else {
        *reinterpret_cast<uint4*>(slot + xdst[q]) = make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto stage_x_block = [&](int b) {
    if (p.parts == 1) {
      stage_x_part(b, 0);
    } else {
      for (int pp = 0; pp < p.parts; ++pp) stage_x_part(b, pp);
    }
  };

  // ---- Prologue: stage X[0 .. rows) x [k0, k1) (zeros past K; with the ring only its first kRingBlocks blocks)
  // and the slice's meta by cp.async, request the first kStages weight tiles, and at MT >= 4 sum X per group once
  // the staging has landed.
  {
    const int zrows = MT == 1 ? xrows : kRows;
    auto stage_x = [&]() {
      if (x_ring) {
        stage_x_block(0);
#pragma unroll
        for (int b = 1; b < kRingBlocks; ++b) {
          if (b * kDepth < nch) stage_x_block(b);  // every part holds nch tiles (fused_ring_parts_even)
        }
        if constexpr (MT > 1) {
          // Rows xrows .. kRows of every part's block in every slot (kXSlots * parts blocks, xpart_halves apart).
          const int zr = kRows - xrows;
          for (int i = threadIdx.x; i < kXSlots * p.parts * zr * kVecs; i += kThreads) {
            const int r = xrows + (i / kVecs) % zr, c = (i % kVecs) * 8, blk = i / (kVecs * zr);
            *reinterpret_cast<uint4*>(x_sh + blk * xpart_halves + r * xs_stride + c) = make_uint4(0, 0, 0, 0);
          }
        }
      } else if (p.x_vec && MT == 1) {
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
      } else if (p.x_vec) {
        // MT >= 2 (16 or more rows): whole rows per warp, 16 bytes per lane along the row, so that no thread runs
        // an empty row loop (the all-threads-per-row loop above was 15% of the instructions at M = 16).
        for (int r = warp; r < kRows; r += kWarps) {
          for (int c = lane * 8; c < slice; c += 256) {
            uint16_t* dst = x_sh + r * xs_stride + c;
            if (r < xrows && k0 + c < p.k) {
              cp_async16(dst, x_gl + r * p.ldx + k0 + c);
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
    };
    const int g_first = per_channel ? 0 : k0 / p.group_k;
    // The slice's meta (fp16; per segment the CTA's rows are contiguous: 16-byte pieces of 4 (int4) or 8 (int8)
    // rows; pieces past n_pad or past the last group are zero). Per channel every segment holds group 0.
    auto stage_meta = [&]() {
      constexpr int kPieceRows = 16 / D::kMetaEntry;
      const int pieces = cta_rows / kPieceRows;
      for (int i = threadIdx.x; i < n_seg * pieces; i += kThreads) {
        const int seg = i / pieces, row = nb * cta_rows + (i % pieces) * kPieceRows;
        const int grp = per_channel ? 0 : g_first + seg;
        uint8_t* dst = meta16_sh + static_cast<size_t>(seg) * cta_rows * 4 + (i % pieces) * 16;
        if (row < p.n_pad && grp < p.num_groups) {
          cp_async16(dst, p.meta + (static_cast<size_t>(grp) * p.n_pad + row) * D::kMetaEntry);
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        }
      }
    };
    // Weight tiles [u0, u1), one cp.async group each (empty groups past the slice keep the count).
    auto request_first_tiles = [&](auto u0_tag, auto u1_tag) {
#pragma unroll
      for (int u = decltype(u0_tag)::value; u < decltype(u1_tag)::value; ++u) {
        if (active && u < nch) cp_async16_hint(ring_addr(u), w_gl + static_cast<size_t>(u) * 512, policy);
        cp_async_commit();
      }
    };
    // X and meta first (one cp.async group), so that the prologue does not wait behind the weight tiles. Under
    // programmatic dependent launch, meta and the first weight tiles need nothing from the previous kernel and
    // are requested while it finishes; X (possibly its output) only after it has, as the youngest group.
    if (!p.pdl) {
      stage_x();
      stage_meta();
      cp_async_commit();
      // The first ring block before the wait, the others once the staging has landed: X and meta queue behind one
      // block of weight requests, not the whole ring (deep ring, H200: 0.990x the time of requesting all 8 tiles
      // first; docs/gemm.md, "Session 35").
      request_first_tiles(std::integral_constant<int, 0>{}, std::integral_constant<int, kDepth>{});
      cp_async_wait_group<kDepth>();  // the staging group (older than the weight tiles) has landed
      request_first_tiles(std::integral_constant<int, kDepth>{}, std::integral_constant<int, kStages>{});
    } else {
      stage_meta();
      cp_async_commit();
      request_first_tiles(std::integral_constant<int, 0>{}, std::integral_constant<int, kStages>{});
      ptx::griddep_wait();
      stage_x();
      cp_async_commit();
      cp_async_wait_group<0>();  // X, and with it the meta and the first tiles
    }
    __syncthreads();
    fused_stamp(kFusedTlReady);
    if constexpr (kSums && !kLoopSums) {
      // MT >= 4: group sums of X in the prologue, by the tensor cores (A = ones, so every row of D is
      // sum_k X[token][k]); 16 more accumulators per lane in the main loop would spill there. Tasks are
      // (segment, piece): with fewer than 8 segments each is split into pieces, so that all warps help.
      const int seg_units = seg_len / 32;  // ldmatrix.x4 steps (32 K values) per segment
      const int ps = max(1, min(kWarps / n_seg, seg_units));
      const int tasks = n_seg * ps;
      const uint32_t ones = BF16 ? 0x3F803F80u : 0x3C003C00u;
      const uint32_t a1[4] = {ones, ones, ones, ones};
      const int units = slice / 32;
      for (int task = warp; task < tasks; task += kWarps) {
        int ua, ub;
        if (ps == 1) {  // one task per segment (five or more segments, e.g. g128 slices of >= 640): no divisions
          ua = task * seg_units;
          ub = min(ua + seg_units, units);
        } else {
          const int seg = task / ps, piece = task % ps;
          const int u0 = seg * seg_units, nu = min(u0 + seg_units, units) - u0;
          ua = u0 + piece * nu / ps;
          ub = u0 + (piece + 1) * nu / ps;
        }
        float s[MT][4];
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) s[j][i] = 0.f;
        for (int u = ua; u < ub; ++u) {
#pragma unroll
          for (int j = 0; j < MT; ++j) {
            uint32_t b[4];
            ldmatrix_x4(b, xb_lane + j * xj_stride + static_cast<uint32_t>(u * 64));
            mma_acc<BF16, false>(s[j], a1, b[0], b[1]);
            mma_acc<BF16, false>(s[j], a1, b[2], b[3]);
          }
        }
        if (g == 0) {
#pragma unroll
          for (int j = 0; j < MT; ++j)
            *reinterpret_cast<float2*>(xpart_sh + task * kRows + j * 8 + 2 * t) = make_float2(s[j][0], s[j][1]);
        }
      }
      __syncthreads();
      if (ps > 1) {  // reduce the parts (uniform branch)
        for (int i = threadIdx.x; i < n_seg * kRows; i += kThreads) {
          const int seg = i / kRows, r = i % kRows;
          float s = 0.f;
          for (int q = 0; q < ps; ++q) s += xpart_sh[(seg * ps + q) * kRows + r];
          xsum_sh[i] = s;
        }
        __syncthreads();
        xsum = xsum_sh;
      }
    }
  }

  // acc: the warp's sums; ga: the current group's code x X sums; xs: the current group's X sums per token, by
  // the tensor cores from the B fragments the group's MMAs load anyway (A = ones: every row of D is
  // sum_k X[token][k]; c0 / c1 hold tokens 2t / 2t + 1, as the flush needs them).
  float acc[MT][4], ga[MT][4], xs[kLoopSums ? MT : 1][4];
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = ga[j][i] = 0.f;
#pragma unroll
  for (int j = 0; j < (kLoopSums ? MT : 1); ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) xs[j][i] = 0.f;
  const uint32_t ones = BF16 ? 0x3F803F80u : 0x3C003C00u;
  const uint32_t a_ones[4] = {ones, ones, ones, ones};

  // Group flush: acc += s * group_acc + (o - magic * s) * sum_group(X), per row (g, g + 8) and token. The fp16
  // meta of rows g and g + 8 is converted here (v13; before, a prologue pass of the CTA wrote an fp32 table, 16
  // bytes per row pair and segment, which held a whole K slice in shared memory and cost a barrier), with the
  // magic number, the zero point (o = -z * s) and the x1/16 of the fp16 int4 rows g + 8 folded in.
  const uint8_t* meta_lane = meta16_sh + (rb * 16 + g) * D::kMetaEntry;
  auto flush = [&](int seg) {
    const uint8_t* mrow = meta_lane + seg * cta_rows * 4;
    float4 mm;
    if constexpr (BITS == 4) {
      const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(mrow));
      const float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(mrow + 8 * D::kMetaEntry));
      const float o0 = p.zero_point ? -f0.y * f0.x : f0.y, o1 = p.zero_point ? -f1.y * f1.x : f1.y;
      const float s1 = f1.x * D::kHiRowScale;
      mm = make_float4(f0.x, fmaf(-D::kMagic, f0.x, o0), s1, fmaf(-D::kMagic, s1, o1));
    } else {
      const float s0 = __half2float(*reinterpret_cast<const __half*>(mrow));
      const float s1 = __half2float(*reinterpret_cast<const __half*>(mrow + 8 * D::kMetaEntry));
      mm = make_float4(s0, -D::kMagic * s0, s1, -D::kMagic * s1);
    }
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      float2 xg = make_float2(0.f, 0.f);
      if constexpr (kLoopSums) {
        xg = make_float2(xs[j][0], xs[j][1]);
      } else if constexpr (kSums) {
        xg = *reinterpret_cast<const float2*>(xsum + 2 * t + seg * kRows + j * 8);
      }
      if constexpr (kSums) {
        acc[j][0] = fmaf(mm.y, xg.x, fmaf(mm.x, ga[j][0], acc[j][0]));
        acc[j][1] = fmaf(mm.y, xg.y, fmaf(mm.x, ga[j][1], acc[j][1]));
        acc[j][2] = fmaf(mm.w, xg.x, fmaf(mm.z, ga[j][2], acc[j][2]));
        acc[j][3] = fmaf(mm.w, xg.y, fmaf(mm.z, ga[j][3], acc[j][3]));
      } else {
        acc[j][0] = fmaf(mm.x, ga[j][0], acc[j][0]);
        acc[j][1] = fmaf(mm.x, ga[j][1], acc[j][1]);
        acc[j][2] = fmaf(mm.z, ga[j][2], acc[j][2]);
        acc[j][3] = fmaf(mm.z, ga[j][3], acc[j][3]);
      }
    }
  };
  // One tile: kKSteps k-steps, two per ldmatrix.x4 of each token tile. kZeroFirst: the tile starts a group
  // (its first MMA overwrites the group accumulators). kHalf (int4 g32): every pair of k-steps is a group of
  // its own, flushed here (segments seg_base, seg_base + 1).
  auto tile = [&](const uint4& v, uint32_t xt, auto zero_tag, auto half_tag, int seg_base) {
    constexpr bool kZeroFirst = decltype(zero_tag)::value;
    constexpr bool kHalf = decltype(half_tag)::value;
#pragma unroll
    for (int h = 0; h < D::kKSteps / 2; ++h) {
      uint32_t a0[4], a1[4];
      D::frag(v, 2 * h, a0);
      D::frag(v, 2 * h + 1, a1);
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        uint32_t b[4];
        ldmatrix_x4(b, xt + j * xj_stride + static_cast<uint32_t>(h * 64));
        if (kHalf || (kZeroFirst && h == 0)) {
          mma_acc<BF16, true>(ga[j], a0, b[0], b[1]);
          if constexpr (kLoopSums) mma_acc<BF16, true>(xs[j], a_ones, b[0], b[1]);
        } else {
          mma_acc<BF16, false>(ga[j], a0, b[0], b[1]);
          if constexpr (kLoopSums) mma_acc<BF16, false>(xs[j], a_ones, b[0], b[1]);
        }
        mma_acc<BF16, false>(ga[j], a1, b[2], b[3]);
        if constexpr (kLoopSums) mma_acc<BF16, false>(xs[j], a_ones, b[2], b[3]);
      }
      if constexpr (kHalf) flush(seg_base + h);
    }
  };

  // Main loop over the slice's nch tiles; tile c sits in ring stage c % kStages and is requested kStages tiles
  // ahead. Whole blocks of kDepth tiles are unrolled with the group ends at fixed positions (a group is TPG whole
  // tiles, and kDepth is a multiple of TPG; the slice starts on a group boundary), so they carry no bookkeeping;
  // the last nch % kDepth tiles follow with counters. TPG 0: no group ends inside the slice (per channel); -1: two
  // groups per tile (int4 g32).
  auto run = [&](auto tpg_tag) {
    constexpr int TPG = decltype(tpg_tag)::value;
    // Tile u of a ring block whose X columns start at xa (segment seg at the block's start): the group bookkeeping
    // of TPG as compile-time choices.
    auto tile_at = [&](const uint4& v, uint32_t xa_, int u, int seg_) {
      const uint32_t xt = xa_ + static_cast<uint32_t>(u * D::kChunkK * 2);
      if constexpr (TPG == -1) {
        tile(v, xt, std::false_type{}, std::true_type{}, seg_ + 2 * u);
      } else if constexpr (TPG == 0) {
        tile(v, xt, std::false_type{}, std::false_type{}, 0);
      } else {
        if (u % TPG == 0) {
          tile(v, xt, std::true_type{}, std::false_type{}, 0);
        } else {
          tile(v, xt, std::false_type{}, std::false_type{}, 0);
        }
      }
    };
    const uint8_t* wp = w_gl + kStages * 512;  // the tile kStages ahead
    uint32_t xa = xw_lane;
    int seg = seg0;
    const int n_full = nch / kDepth * kDepth;
    const uint32_t xslot_bytes = static_cast<uint32_t>(xslot_halves * 2);
    for (int c0 = 0; c0 < n_full; c0 += kDepth) {
      // Tiles after this block's refills: stage u is refilled while u < ahead (a warp past N refills nothing; it
      // runs the loop only to take part in the X ring's barriers and copies).
      const int ahead = (active ? nch : 0) - c0 - kStages;
      const int sbase = kRingBlocks == 1 ? 0 : (c0 / kDepth) % kRingBlocks * kDepth;  // the block's first stage
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        // Wait for tile c0 + u (kStages - 1 younger groups may stay in flight), read it, refill the stage with
        // tile c0 + u + kStages (every lane reads only the 16 bytes it copied itself, so no barrier is needed),
        // compute.
        cp_async_wait_group<kStages - 1>();
        if (u == 0 && x_ring) {
          // The group of tile c0 also holds this thread's copies of the block's X (staged kRingBlocks blocks
          // ahead): after the barrier every thread's have landed, and every warp is done with the previous block,
          // whose slot takes the block kRingBlocks ahead.
          __syncthreads();
        }
        const uint4 v = lds128(ring_addr(sbase + u));
        if (u < ahead) cp_async16_hint(ring_addr(sbase + u), wp + u * 512, policy);
        if (u == 0 && x_ring && nch - c0 - kStages > 0) stage_x_block(c0 / kDepth + kRingBlocks);
        cp_async_commit();
        tile_at(v, xa, u, seg);
        if constexpr (TPG > 0) {
          if ((u + 1) % TPG == 0) flush(seg + u / TPG);
        }
      }
      wp += kDepth * 512;
      if (x_ring) {
        // The next block's slot.
        xa = kXSlots == 2 ? ((c0 / kDepth) % 2 == 0 ? xw_lane + xslot_bytes : xw_lane)
                          : xw_lane + static_cast<uint32_t>((c0 / kDepth + 1) % kXSlots) * xslot_bytes;
      } else {
        xa += static_cast<uint32_t>(kDepth * D::kChunkK * 2);
      }
      seg += TPG > 0 ? kDepth / TPG : TPG == -1 ? 2 * kDepth : 0;
    }
    // The last rem < kDepth tiles: all of them are in flight already (the last kStages committed groups hold
    // tiles n_full + u, u < kStages, one each, empty past the slice). n_full is a multiple of TPG, so the groups
    // still start at fixed positions; only the last one may be shorter (the K tail of a row).
    const int rem = nch - n_full;
    if (x_ring && rem > 0) {
      cp_async_wait_pending(kStages - 1);  // tile n_full, and this thread's copies of the last block's X
      __syncthreads();
    }
    const int sbase = kRingBlocks == 1 ? 0 : (n_full / kDepth) % kRingBlocks * kDepth;  // stage of tile n_full
#pragma unroll
    for (int u = 0; u < kDepth - 1; ++u) {
      if (u < rem) {
        cp_async_wait_pending(kStages - 1 - u);
        const uint4 v = lds128(ring_addr(sbase + u));
        tile_at(v, xa, u, seg);
        if constexpr (TPG > 0) {
          if ((u + 1) % TPG == 0 || u == rem - 1) flush(seg + u / TPG);
        }
      }
    }
    if constexpr (TPG == 0) flush(seg0);
  };

  if ((active || x_ring) && nch > 0) {
    if (per_channel) {
      run(std::integral_constant<int, 0>{});
    } else if (p.group_k < D::kChunkK) {
      if constexpr (BITS == 4) run(std::integral_constant<int, -1>{});
    } else if (p.group_k == D::kChunkK) {
      run(std::integral_constant<int, 1>{});
    } else if (p.group_k == 2 * D::kChunkK) {
      run(std::integral_constant<int, 2>{});
    } else {
      if constexpr (BITS == 8) run(std::integral_constant<int, 4>{});
    }
  }

  fused_stamp(kFusedTlLoopEnd);
  // ---- Epilogue. The parts' sums are added into part 0's warps through the (now idle) weight ring.
  if (p.parts > 1) {
    if constexpr (fused_parts_supported(MT)) {
      float* red = reinterpret_cast<float*>(smem);  // [warp][MT * 4][32 lanes]
      __syncthreads();                              // every warp is out of its ring
      if (part > 0) {
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) red[(warp * MT * 4 + j * 4 + i) * 32 + lane] = acc[j][i];
      }
      __syncthreads();
      if (part == 0) {
        for (int q = 1; q < p.parts; ++q) {
#pragma unroll
          for (int j = 0; j < MT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[j][i] += red[((q * rbs + rb) * MT * 4 + j * 4 + i) * 32 + lane];
        }
      }
    }
  }
  const bool owner = active && part == 0;  // this warp writes (or adds) its row block's sums
  if (p.num_splits == 1) {
    if (!owner) return;
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
  // Split-K: add this slice's sums into the fp32 accumulator [n_pad][kRows] (float2 reductions, L2), then the
  // last CTA of the column block (ticket) finishes it and leaves the accumulator zero for the next call. With M
  // odd, the last pair's second token is a column past M that the atomics fill too: the last CTA clears it as well
  // (a later call with more tokens, or another call sharing the workspace, would otherwise find these sums there).
  if (owner) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int m = j * 8 + 2 * t;
      if (m < p.m) {
        float* a0 = p.partial + static_cast<size_t>(nt * 16 + g) * kRows + m;
        ptx::atomic_add2(a0, acc[j][0], acc[j][1]);
        ptx::atomic_add2(a0 + 8 * kRows, acc[j][2], acc[j][3]);
      }
    }
  }
  // One thread takes the ticket after the barrier (ptx::split_arrive, ticket_arrive: its release orders the whole
  // CTA's atomics before the ticket, its acquire the last CTA's reads below after every other CTA's atomics; session
  // 33: before, a fence on either side of a relaxed atomic, 2-5% of a split call's time).
  // The flag lives in the (idle) weight ring: a static __shared__ variable would shift the dynamic shared memory
  // by 16 bytes, and with it every cp.async destination (v12, measured: the prologue's copies then took two L2
  // sectors per 16 bytes and the whole call 1.3-5 µs longer, docs/gemm.md).
  if (!ptx::split_arrive(p.tickets + nb, p.num_splits, threadIdx.x == 0, reinterpret_cast<int*>(smem),
                         [] { __syncthreads(); }))
    return;
  // The column block's sums are one contiguous [rows][kRows] block of the accumulator: each thread loads its
  // float4s (at most MT) first, so that their L2 round trips overlap, then zeroes them (all kRows columns, the odd
  // one past M included) and stores Y. Session 33: a loop that loaded one value, cleared it and stored Y before the
  // next load (whose address the compiler could not separate from those stores) made a chain of M * rows / 256 L2
  // round trips, ~4 µs of a 16-token call with a split (docs/gemm.md). The second loop stays rolled, so the float4s
  // sit in the thread's stack (16 bytes per token tile, touched by the last CTA only): unrolled, it changed ptxas's
  // register allocation of the int4 bf16 16-token kernel into spilling, and its unsplit calls took 1-3% longer.
  constexpr int kVecs4 = kRows / 4;  // float4s per accumulator row
  float4* blk = reinterpret_cast<float4*>(p.partial + static_cast<size_t>(nb) * cta_rows * kRows);
  const int total4 = min(cta_rows, p.n_pad - nb * cta_rows) * kVecs4;
  float4 sums[MT];  // kBlockN rows x kRows / 4 float4s = MT per thread
#pragma unroll
  for (int q = 0; q < MT; ++q) {
    const int i = threadIdx.x + q * kThreads;
    if (i < total4) sums[q] = __ldcg(blk + i);
  }
#pragma unroll 1
  for (int q = 0; q < MT; ++q) {
    const int i = threadIdx.x + q * kThreads;
    if (i >= total4) continue;
    __stcg(blk + i, make_float4(0.f, 0.f, 0.f, 0.f));
    const int n = nb * cta_rows + i / kVecs4, m0 = (i % kVecs4) * 4;
    if (n >= p.n || m0 >= p.m) continue;
    const float b = p.bias ? p.bias[n] : 0.f;
    const float v[4] = {sums[q].x, sums[q].y, sums[q].z, sums[q].w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (m0 + e < p.m) store_y(p.y, static_cast<long long>(m0 + e) * p.ldy + n, apply_act(v[e] + b, p.act), p.y_dtype);
    }
  }
  if (threadIdx.x == 0) p.tickets[nb] = 0;  // ready for the next call
}

// Instantiation list entry (one per kernel in gemm_w4.cu / gemm_w8.cu).
struct FusedKernelInfo {
  int bits;
  bool bf16;
  int mt;
  int ring_blocks;  // RB
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
