// Fused GQA decode attention over a tiled (contiguous or paged) KV cache in any qdec KV format.
//
//   Q, O  [batch, num_qo_heads, head_dim]            bf16 / fp16
//   K, V  tiles of page_size tokens of one KV head    docs/formats.md (block16 fragment order + meta region)
//   out   num_splits == 1: O (and lse); otherwise partials part_o [batch, num_qo_heads, num_splits, head_dim]
//         and part_lse (log2 domain), merged by decode_merge.cu.
//
// Design
// - One CTA = (split, kv head, sequence): all group_size (<= 16) query heads of the KV head share every KV
//   byte read from HBM. The products run transposed so the heads are the n = 8 side of mma.m16n8k16 (no
//   padding of a group of 8 to 16 rows): S^T = K Q^T with K as the A operand (m = 16 tokens, k = dims), and
//   O^T = V^T P^T with V as the A operand (m = 16 dims, k = tokens). P^T comes from the S^T accumulators by
//   one movmatrix.trans per 8x8 tile. NH = 2 head tiles when group_size > 8.
// - 4, 8 or 16 warps (decode_warps, decode_dispatch.h); a pipeline stage is one block16 per warp, kStages deep.
//   Each warp copies its own block16 of a stage global -> shared with 16-byte cp.async and its own commit groups,
//   and synchronizes with __syncwarp only (no block barrier in the loop); pages come from a per-warp block-table
//   cursor. The cache stores values in A-fragment order (docs/formats.md), so every lane reads its fragments with
//   plain shared loads and dequantizes in registers (lop3 / prmt / cvt); no transpose, no ldmatrix on sub-16-bit
//   data.
// - Quantized formats compute in fp16 on exact codes (int4: the subnormal q * 2^-24 by one AND, 16q on the odd
//   rows to save shifts; int8: 1152+q via the 0x64 magic; fp8: exact fp16). Scales stay outside the MMA: K has one
//   accumulator per scale group (16k dims = whole k-steps), scaled per token afterwards, with the magic and the int4
//   shift folded into a per-token bias times sum(Q over the group) (int4 with 2, 4 or 8 groups: all groups' shift terms
//   by one MMA per block16; see kKPair); V folds its per-token scale into P
//   (P' = P * s * v_norm, one P' per group) and its int4 shift into a side sum P * z (int4 with 4 or 8 groups: P'
//   from P^T by an fp16 multiply per register, the shift sums by one MMA per block16; see kVPair). Q is brought into
//   fp16 with a power-of-two factor (exact for bf16 inputs) folded into the softmax scale.
// - Online softmax per warp in the log2 domain; warps merge through shared memory at the end; split-K
//   partials are merged by decode_merge.cu (programmatic dependent launch).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/decode_timeline.cuh"
#include "qdec/formats.h"
#include "runtime/ptx.cuh"

namespace qdec::attention {

// Warps per CTA (a warp owns one block16 of every pipeline stage): 8 at head_dim 128, 4 at head_dim 64. int4 V caches
// at head_dim 128 also have a 4-warp kernel (pages of 16 and 32 tokens) and a 16-warp one (group_size <= 8) for one
// unsplit CTA per SM, and 16-bit caches at head_dim 128 a 4-warp one for unsplit grids of two CTAs per SM
// (decode_dispatch.h, decode_launcher.cu). Measured on the H200
// (docs/attention.md, v22): one 8-warp CTA per (sequence, KV head) streams an 8- or 16-bit cache as fast as two of 4
// warps with half the splits (B = 128 needs none, and no merge kernel: -2.4..-4.4%), and two 8-warp CTAs per SM run
// the instruction-bound int4 loop faster than four of 4 warps (B = 256 int4 -4.6%, B = 512 -5.1%).
template <class KF, class VF, int D>
constexpr int decode_warps() {
  return D == 128 ? 8 : 4;
}

struct DecodeKernelParams {
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  const int32_t* block_table;  // nullptr: contiguous (page = b * max_pages_per_seq + t / page_size)
  const int32_t* seq_lens;
  const void* q;
  void* o;
  float* lse;       // optional, natural log
  float* part_o;    // [B, HQ, S, D] when num_splits > 1
  float* part_lse;  // [B, HQ, S] (log2 domain)
  long long k_page_stride;
  long long v_page_stride;
  int k_tile_bytes;
  int v_tile_bytes;
  int page_size_log2;
  int max_pages_per_seq;
  int num_qo_heads;
  int group_size;
  int num_splits;
  float sm_scale_log2;  // sm_scale * log2(e)
  int q_is_fp16;
  int pdl_tail_tokens;  // > 0: launched as a programmatic dependent that writes the last tokens (see load)
};

// ---- Format traits ----------------------------------------------------------------------------------------
template <KvKind Kind, int Groups>
struct Fmt {
  static constexpr KvKind kKind = Kind;
  static constexpr int kGroups = Groups;  // scale groups per row (1 for 16-bit and fp8)
  static constexpr bool kQuant = Kind != KvKind::kBF16 && Kind != KvKind::kFP16;
  static constexpr bool kBF16 = Kind == KvKind::kBF16;
  static constexpr int kBits = Kind == KvKind::kINT4 ? 4 : (kQuant ? 8 : 16);
  // Bytes of one (token, group) meta entry: fp8 fp32 scale, int8 fp16 scale, int4 fp16 scale + shift.
  static constexpr int kMetaEntry = Kind == KvKind::kINT8 ? 2 : (kQuant ? 4 : 0);
  static constexpr bool kHasShift = Kind == KvKind::kINT4;
  // fp16 value of code 0 after the register conversion (the value is (q + kMagic) / kCodeScale exactly).
  static constexpr float kMagic = Kind == KvKind::kINT8 ? 1152.f : 0.f;
  // int4 codes are fp16 subnormals q * 2^-24.
  static constexpr float kCodeScale = Kind == KvKind::kINT4 ? 16777216.f : 1.f;
  // Extra factor on the codes of A-operand rows g+8 (registers 1 and 3): int4 keeps them as 16q * 2^-24.
  static constexpr float kOddRowScale = Kind == KvKind::kINT4 ? 16.f : 1.f;
};

template <class F, int D>
struct BlockGeom {
  static constexpr int kDataBytes = kBlockTokens * D * F::kBits / 8;            // one block16 of values
  static constexpr int kMetaBytes = kBlockTokens * F::kGroups * F::kMetaEntry;  // one block16's scales
};

// ---- Register helpers -------------------------------------------------------------------------------------
using ptx::cp_async16;
using ptx::mma16816;
using ptx::prmt;
__device__ __forceinline__ uint32_t cvt_e4m3x2_f16x2(uint32_t two_bytes) {
  uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  // No fp8 conversion below sm_89: every e4m3 value is an fp16 value. Its 7 magnitude bits at fp16 bits 7..13 read
  // as 2^-8 times the value (subnormals included), so one exact fp16 multiply by 2^8 restores it; 0x7F / 0xFF (NaN)
  // become fp16 NaN, as the conversion gives.
  d = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t b = (two_bytes >> (8 * h)) & 0xFFu;
    const unsigned short bits = static_cast<unsigned short>(((b & 0x80u) << 8) | ((b & 0x7Fu) << 7));
    const unsigned short v = (b & 0x7Fu) == 0x7Fu
                                 ? static_cast<unsigned short>(((b & 0x80u) << 8) | 0x7E00u)
                                 : __half_as_ushort(__hmul(__ushort_as_half(bits), __ushort_as_half(0x5C00)));
    d |= static_cast<uint32_t>(v) << (16 * h);
  }
#else
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(d) : "r"(two_bytes));
#endif
  return d;
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t hsub2_u32(uint32_t a, uint32_t b) {
  __half2 r = __hsub2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, uint32_t b) {
  __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 2^x with one MUFU.EX2 (exp2f adds a subnormal-range fix-up: FSETP + 2 FMUL per call). Results below
// 2^-126 flush to 0, which no softmax weight needs.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The warp's V normalizer: 2^n with n = -e for its largest scale mx < 2^e, clamped to [lo, hi], or 0 while every lane's
// scale is 0 or above `limit` (the caller tries again at its next scales). `n_out` receives n.
__device__ __forceinline__ float warp_v_norm(float mx, float limit, int lo, int hi, int* n_out = nullptr) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (!(mx > 0.f && mx <= limit)) return 0.f;
  int ex;
  frexpf(mx, &ex);
  const int n = max(lo, min(hi, -ex));
  if (n_out) *n_out = n;
  return ldexpf(1.f, n);
}

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(x));
  return d;
}

// Fragment f of a lane (docs/formats.md, "Data order"), converted to the 4 A-operand registers of one
// mma.m16n8k16. `lane_base` points at this lane's 16 bytes of chunk 0 of the block16 in shared memory.
template <class F>
__device__ __forceinline__ void load_frag(const uint8_t* lane_base, int f, uint32_t (&r)[4]) {
  constexpr int kFragBytes = F::kBits;  // 8 values of kBits bits
  const int byte = f * kFragBytes;
  if constexpr (F::kBits == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(lane_base + (byte / 16) * 512 + (byte % 16));
    r[0] = v.x;
    r[1] = v.y;
    r[2] = v.z;
    r[3] = v.w;
  } else if constexpr (F::kBits == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(lane_base + (byte / 16) * 512 + (byte % 16));
    if constexpr (F::kKind == KvKind::kINT8) {
      const uint32_t x0 = v.x ^ 0x80808080u, x1 = v.y ^ 0x80808080u;  // two's complement -> q + 128
      r[0] = prmt(x0, 0x64646464u, 0x4140);
      r[1] = prmt(x0, 0x64646464u, 0x4342);
      r[2] = prmt(x1, 0x64646464u, 0x4140);
      r[3] = prmt(x1, 0x64646464u, 0x4342);
    } else if constexpr (F::kKind == KvKind::kFP8E5M2) {  // e5m2 is the high byte of an fp16
      r[0] = prmt(v.x, 0u, 0x1404);
      r[1] = prmt(v.x, 0u, 0x3424);
      r[2] = prmt(v.y, 0u, 0x1404);
      r[3] = prmt(v.y, 0u, 0x3424);
    } else {
      r[0] = cvt_e4m3x2_f16x2(v.x);
      r[1] = cvt_e4m3x2_f16x2(v.x >> 16);
      r[2] = cvt_e4m3x2_f16x2(v.y);
      r[3] = cvt_e4m3x2_f16x2(v.y >> 16);
    }
  } else {
    // A nibble in the low mantissa bits of an fp16 is the subnormal q * 2^-24: exact, and the tensor cores
    // take fp16 subnormals, so one AND per register converts (no magic to subtract). Registers 1 and 3
    // keep their nibbles at bits 4..7 (16q * 2^-24), which saves two of three shifts; they hold rows g+8
    // of the A operand (tokens g+8 of K, dims g+8 of V), and the x16 is undone on those output rows.
    // Read the whole 16-byte chunk (4 fragments): the compiler merges the repeated loads of a chunk into
    // one LDS.128 instead of four 4-byte loads.
    const uint4 v = *reinterpret_cast<const uint4*>(lane_base + (byte / 16) * 512);
    const int word = (byte % 16) / 4;
    const uint32_t w = word == 0 ? v.x : word == 1 ? v.y : word == 2 ? v.z : v.w;
    const uint32_t w8 = w >> 8;
    r[0] = w & 0x000F000Fu;
    r[1] = w & 0x00F000F0u;
    r[2] = w8 & 0x000F000Fu;
    r[3] = w8 & 0x00F000F0u;
  }
}

// Scale (and int4 shift) of tokens g and g + 8 for one group; `meta` points at the group's entry of the
// warp's first token in the stage's [group][64] shared-memory array.
template <class F>
__device__ __forceinline__ void load_meta2(const uint8_t* meta, int g, float (&s)[2], float (&z)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint8_t* e = meta + (g + 8 * h) * F::kMetaEntry;
    if constexpr (F::kKind == KvKind::kINT4) {
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(e));
      s[h] = a.x;
      z[h] = a.y;
    } else if constexpr (F::kKind == KvKind::kINT8) {
      s[h] = __half2float(*reinterpret_cast<const __half*>(e));
      z[h] = 0.f;
    } else {
      s[h] = *reinterpret_cast<const float*>(e);
      z[h] = 0.f;
    }
  }
}

template <class KF, class VF, int D, int W>
struct DecodeSmem {
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  static constexpr int kWarps = W;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStageTokens = kWarps * kBlockTokens;  // one block16 per warp
  static constexpr int kStageBytes = kWarps * (KG::kDataBytes + VG::kDataBytes + KG::kMetaBytes + VG::kMetaBytes);
  static constexpr int kStages = kStageBytes <= kWarps * 2560 ? 5 : 3;  // 5 for int4, 3 for 8- and 16-bit
  static constexpr int kPipeBytes = kStages * kStageBytes;
  // The epilogue's per-warp O rows [warp][16 heads][kORow]: a row of D + 4 floats puts the four lanes that store one
  // dim of heads 2 * tig + h on four different banks (a row of D floats put them on one: 4-way conflicts on every
  // store of the epilogue; ncu, long 128K int4, session 37). D + 4 floats keep the rows' float4 reads aligned.
  static constexpr int kORow = D + 4;
  static constexpr int kCombineBytes = kWarps * 16 * kORow * 4 + 2 * kWarps * 16 * 4;  // O rows, m and l
  static constexpr int kQBytes = 16 * D * 4;                                           // Q as float, set-up only
  static constexpr int kAuxBytes = KF::kGroups * 16 * 4 + 64;  // per-group Q sums (read in the loop) + scratch
  // Q is staged in the last pipeline buffer: the prologue fills buffers 0..kStages-2 only, and the first
  // copy into the last one is issued after the barrier that ends the Q set-up.
  static constexpr bool kQInPipe = kStageBytes >= kQBytes;
  static constexpr int kMainBytes = kPipeBytes > kCombineBytes ? kPipeBytes : kCombineBytes;
  static constexpr int kQOffset = kQInPipe ? (kStages - 1) * kStageBytes : kMainBytes + kAuxBytes;
  static constexpr int kAuxOffset = kMainBytes;
  static constexpr int kBytes = kMainBytes + kAuxBytes + (kQInPipe ? 0 : kQBytes);
  // Offsets inside one stage.
  static constexpr int kOffVData = kWarps * KG::kDataBytes;
  static constexpr int kOffKMeta = kOffVData + kWarps * VG::kDataBytes;
  static constexpr int kOffVMeta = kOffKMeta + kWarps * KG::kMetaBytes;
};

// Per-warp block-table cursor: the lanes of a warp hold 32 consecutive entries of the sequence's row (and the
// next 32, loaded one refill ahead), so a block16's page is one shuffle; a warp's block16s advance by one page per
// warp of the CTA per iteration at most (16-token pages: 4-16), so one refill per 2..32 iterations. Contiguous
// caches: page = row + lp.
struct PageCursor {
  const int32_t* row = nullptr;  // this sequence's block-table row, or nullptr (contiguous)
  long long row_off = 0;
  int max_pages = 0;
  int base = 0;  // first logical page held in `cur`
  int cur = 0, nxt = 0;

  __device__ __forceinline__ int load(int lp, int lane) const {
    const int i = lp + lane;
    return i < max_pages ? __ldg(row + i) : 0;
  }
  __device__ __forceinline__ void init(const DecodeKernelParams& p, long long off, int lp0, int lane) {
    row_off = off;
    max_pages = p.max_pages_per_seq;
    if (p.block_table) {
      row = p.block_table + off;
      base = lp0;
      cur = load(base, lane);
      nxt = load(base + 32, lane);
    }
  }
  // Page of logical page lp (non-decreasing across calls, warp-uniform).
  __device__ __forceinline__ long long page(int lp, int lane) {
    if (!row) return row_off + lp;
    if (lp >= base + 32) {  // warp-uniform; lp < base + 64 (steps of <= 16 pages)
      cur = nxt;
      base += 32;
      nxt = load(base + 32, lane);
    }
    return __shfl_sync(0xffffffffu, cur, lp - base);
  }
};

// The meta chunks of a block16: each (group, 16 tokens) run of meta entries is kMetaEntry 16-byte chunks; K's come
// first, then V's (kCount in all).
template <class KF, class VF, int D, int W>
struct MetaChunks {
  using S = DecodeSmem<KF, VF, D, W>;
  static constexpr int KMC = KF::kQuant ? KF::kGroups * KF::kMetaEntry : 0;
  static constexpr int VMC = VF::kQuant ? VF::kGroups * VF::kMetaEntry : 0;
  static constexpr int kCount = KMC + VMC;
  // Chunk c (< kCount) of the warp's block16 at `in_tile` of its tile: returns its offset in a stage; `is_k` says whose
  // it is and `src` its offset from that tile's base.
  static __device__ __forceinline__ int chunk(int c, int warp, int psl, int in_tile, bool& is_k, int& src) {
    using KG = BlockGeom<KF, D>;
    using VG = BlockGeom<VF, D>;
    constexpr int KE = KF::kMetaEntry > 0 ? KF::kMetaEntry : 1, VE = VF::kMetaEntry > 0 ? VF::kMetaEntry : 1;
    is_k = c < KMC;
    const int cv = is_k ? c : c - KMC;
    const int entry = is_k ? KE : VE;
    const int gg = is_k ? cv / KE : cv / VE;
    const int cc = cv - gg * entry;
    const int meta_base = is_k ? (KG::kDataBytes / kBlockTokens) << psl : (VG::kDataBytes / kBlockTokens) << psl;
    src = meta_base + ((gg << psl) + in_tile) * entry + cc * 16;
    return (is_k ? S::kOffKMeta : S::kOffVMeta) + (gg * S::kStageTokens + warp * kBlockTokens) * entry + cc * 16;
  }
};

// One block16 (16 tokens at `in_tile` of the page) of K and V copied by one warp into its slot of a pipeline
// stage: values (fragment order, kDataBytes each) and the 16 tokens' meta entries of every scale group
// (stage layout [group][stage tokens]). Each lane issues 16-byte cp.async from a page base plus offsets; with the
// page lookup this is ~55-70 SASS instructions per block16 (a leaner per-lane plan measured no faster:
// docs/attention.md, v20b).
template <class KF, class VF, int D, int W>
__device__ __forceinline__ void load_block16(const DecodeKernelParams& p, uint8_t* stage, const uint8_t* k_tile,
                                             const uint8_t* v_tile, int in_tile, int warp, int lane) {
  using S = DecodeSmem<KF, VF, D, W>;
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  static_assert(KG::kDataBytes % 512 == 0 && VG::kDataBytes % 512 == 0, "a block16 must split over 32 lanes");
  const int psl = p.page_size_log2;
  {
    const uint8_t* src = k_tile + (size_t)in_tile * (KG::kDataBytes / kBlockTokens) + lane * 16;
    uint8_t* dst = stage + warp * KG::kDataBytes + lane * 16;
#pragma unroll
    for (int i = 0; i < KG::kDataBytes / 512; ++i) cp_async16(dst + i * 512, src + i * 512);
  }
  {
    const uint8_t* src = v_tile + (size_t)in_tile * (VG::kDataBytes / kBlockTokens) + lane * 16;
    uint8_t* dst = stage + S::kOffVData + warp * VG::kDataBytes + lane * 16;
#pragma unroll
    for (int i = 0; i < VG::kDataBytes / 512; ++i) cp_async16(dst + i * 512, src + i * 512);
  }
  // Meta: one group's 16 entries are kMetaEntry 16-byte chunks; lanes [0, KMC) copy K's, the next VMC V's.
  // One select-based path for both (no divergent K / V branches).
  using MC = MetaChunks<KF, VF, D, W>;
#pragma unroll
  for (int c0 = 0; c0 < MC::kCount; c0 += 32) {
    const int c = c0 + lane;
    if (c < MC::kCount) {
      bool is_k;
      int src;
      const int dst = MC::chunk(c, warp, psl, in_tile, is_k, src);
      cp_async16(stage + dst, (is_k ? k_tile : v_tile) + src);
    }
  }
}

// A warp's stage copies where a tile holds at most one stage of tokens: a warp's block16 then sits at the same place of
// its tile at every stage, so each lane's source offsets within a tile are fixed. Over a contiguous cache the tiles of
// a sequence and KV head also lie at a constant stride, so each lane keeps its source pointers and advances them by a
// constant per stage (~25 SASS instructions per block16 instead of the ~77 of load_block16's page lookup and address
// arithmetic, which ptxas partly redoes in the loop: the lane index and the page size from their special and constant
// registers); over a paged cache the tile comes from the page cursor and the sources are its base plus the fixed
// offsets. Used where a block16 is under 2 KB (kStridedCopy: the int4-V caches at head_dim 64), whose loops pay the
// per-block16 cost on the fewest bytes. Measured against load_block16 (docs/attention.md, session 32): SmolLM2's int4-V
// caches 0.89-0.98x the time contiguous and 0.93-1.02x paged on the H200, 0.98-1.02x on the H100; elsewhere (every
// format) it did not pay.
template <class KF, class VF, int D, int W>
struct StridedCopy {
  using S = DecodeSmem<KF, VF, D, W>;
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  using MC = MetaChunks<KF, VF, D, W>;
  static constexpr int kMetaRounds = (MC::kCount + 31) / 32;
  static constexpr int kMR = kMetaRounds > 0 ? kMetaRounds : 1;
  // Contiguous: the lane's source addresses for the next stage; paged: its offsets from the tile base.
  uintptr_t k, v, m[kMR];
  long long dk, dv, dm[kMR];  // contiguous: per stage
  bool m_is_k[kMR];           // whose tile a meta chunk lies in
  int m_dst[kMR];             // meta chunk offsets in a stage
  int t;                      // first token of the warp's block16 of the next stage

  // t0: the first token of the warp's block16 of the first stage this copies.
  __device__ __forceinline__ void init(const DecodeKernelParams& p, const uint8_t* k_head, const uint8_t* v_head,
                                       long long row_off, int t0, bool paged, int warp, int lane) {
    const int psl = p.page_size_log2;
    const int in_tile = t0 & ((1 << psl) - 1);
    const long long tiles = S::kStageTokens >> psl;  // tiles per stage
    dk = tiles * p.k_page_stride;
    dv = tiles * p.v_page_stride;
    const long long pg = row_off + (t0 >> psl);
    const uintptr_t kt = paged ? 0 : reinterpret_cast<uintptr_t>(k_head + pg * p.k_page_stride);
    const uintptr_t vt = paged ? 0 : reinterpret_cast<uintptr_t>(v_head + pg * p.v_page_stride);
    k = kt + in_tile * (KG::kDataBytes / kBlockTokens) + lane * 16;
    v = vt + in_tile * (VG::kDataBytes / kBlockTokens) + lane * 16;
    if constexpr (kMetaRounds > 0) {
#pragma unroll
      for (int r = 0; r < kMR; ++r) {  // lanes past the last chunk keep a valid one (the copies skip them)
        bool is_k;
        int src;
        m_dst[r] = MC::chunk(min(r * 32 + lane, MC::kCount - 1), warp, psl, in_tile, is_k, src);
        m[r] = (is_k ? kt : vt) + src;
        dm[r] = is_k ? dk : dv;
        m_is_k[r] = is_k;
      }
    }
    t = t0;
  }
  // The warp's block16 of the next stage into `stage` (nothing past `end`), then one stage on. Contiguous.
  __device__ __forceinline__ void issue(uint8_t* stage, int end, int warp, int lane) {
    if (t < end) {
      const uint8_t* ms[kMR];
#pragma unroll
      for (int r = 0; r < kMR; ++r) ms[r] = reinterpret_cast<const uint8_t*>(m[r]);
      copy(stage, reinterpret_cast<const uint8_t*>(k), reinterpret_cast<const uint8_t*>(v), ms, warp, lane);
    }
    t += S::kStageTokens;
    k += dk;
    v += dv;
#pragma unroll
    for (int r = 0; r < kMetaRounds; ++r) m[r] += dm[r];
  }
  // The same over a paged cache: the tile of the next stage's block16 from the page cursor.
  __device__ __forceinline__ void issue_paged(uint8_t* stage, int end, const DecodeKernelParams& p,
                                              const uint8_t* k_head, const uint8_t* v_head, PageCursor& pages, int warp,
                                              int lane) {
    if (t < end) {
      const long long pg = pages.page(t >> p.page_size_log2, lane);
      const uint8_t* kt = k_head + pg * p.k_page_stride;
      const uint8_t* vt = v_head + pg * p.v_page_stride;
      const uint8_t* ms[kMR];
#pragma unroll
      for (int r = 0; r < kMR; ++r) ms[r] = (m_is_k[r] ? kt : vt) + m[r];
      copy(stage, kt + k, vt + v, ms, warp, lane);
    }
    t += S::kStageTokens;
  }

 private:
  __device__ __forceinline__ void copy(uint8_t* stage, const uint8_t* ks, const uint8_t* vs, const uint8_t* const* ms,
                                       int warp, int lane) const {
#pragma unroll
    for (int i = 0; i < KG::kDataBytes / 512; ++i)
      cp_async16(stage + warp * KG::kDataBytes + lane * 16 + i * 512, ks + i * 512);
#pragma unroll
    for (int i = 0; i < VG::kDataBytes / 512; ++i)
      cp_async16(stage + S::kOffVData + warp * VG::kDataBytes + lane * 16 + i * 512, vs + i * 512);
#pragma unroll
    for (int r = 0; r < kMetaRounds; ++r)
      if (r * 32 + lane < MC::kCount) cp_async16(stage + m_dst[r], ms[r]);
  }
};

// NH: n-tiles of 8 query heads (1 for group_size <= 8, 2 for 9..16). W: warps (4, 8 or 16). Registers: <= 128 per
// thread with one head tile of a quantized cache (16 warps per SM), <= 255 with two or with a 16-bit cache (8 warps
// per SM). NH = 2 is not instantiated at 16 warps (128 registers at most: it would spill).
template <class KF, class VF, int D, int NH, int W>
__global__ void __launch_bounds__(W * 32, (NH == 1 && KF::kQuant ? 16 : 8) / W)
    decode_attention_kernel(const __grid_constant__ DecodeKernelParams p) {
  using S = DecodeSmem<KF, VF, D, W>;
  constexpr int kWarps = S::kWarps, kThreads = S::kThreads, kStageTokens = S::kStageTokens;
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  constexpr bool kBF16 = KF::kBF16;  // MMA type: bf16 only for a bf16 cache, else fp16
  constexpr bool kQuantK = KF::kQuant;
  constexpr int NF = D / 16;              // fragments per lane: k-steps of K, m-tiles of V
  constexpr int KSPG = NF / KF::kGroups;  // k-steps per K scale group
  constexpr int MTPG = NF / VF::kGroups;  // m-tiles (16 dims) per V scale group
  static_assert(KSPG >= 1 && MTPG >= 1, "scale group narrower than 16 dims");
  // Independent S^T accumulator chains: 2 for a row-wise K scale (one group of 4 or 8 k-steps) with one head
  // tile. Measured (H200, v18): int4 row -1..2%, 8-bit row at head_dim 64 -12%; 4 chains no better than 2;
  // 2 chains on int4-g2's 4-step groups +1..2% (their group chains interleave already); two head tiles are two
  // chains already, with tight registers.
  constexpr int kKChains = NH == 1 && KF::kGroups == 1 && KSPG >= 4 ? 2 : 1;
  // int4 K with 2, 4 or 8 scale groups: the shifts' terms by one MMA per block16 (see qzb below).
  constexpr bool kKPair = KF::kKind == KvKind::kINT4 && KF::kGroups >= 2;
  static_assert(!kKPair || KF::kGroups <= 8, "the shift MMA holds one group per k slot 2tig, 2tig + 1 < 8");
  static_assert(!KF::kBF16 || VF::kBF16, "a bf16 K cache needs a bf16 V cache");

  decode_stamp(kDecTlEntry);  // probe builds only (QDEC_DECODE_TIMELINE)
  decode_stamp(kDecTlSm);
  [[maybe_unused]] const DecodeStampAtExit stamp_exit;

  extern __shared__ __align__(16) uint8_t smem[];
  float* q_s = reinterpret_cast<float*>(smem + S::kQOffset);       // [16][D], set-up only
  float* qsum_s = reinterpret_cast<float*>(smem + S::kAuxOffset);  // [KG][16]
  float* red_s = qsum_s + KF::kGroups * 16;                        // scratch (16 floats)
  static_assert(kWarps <= 16, "red_s holds one value per warp");

  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int len = p.seq_lens[b];
  const int gs = p.group_size;
  const int qh0 = kvh * gs;

  // Split range: a multiple of the stage size so only the last stage of a split is partial.
  const int per_split = ((len + p.num_splits - 1) / p.num_splits + kStageTokens - 1) / kStageTokens * kStageTokens;
  const int start = split * per_split;
  const int end = min(len, start + per_split);

  if (start >= end) {  // nothing to do: an empty partial (weight 0 in the merge)
    if (p.num_splits > 1) {
      for (int i = tid; i < gs * D; i += kThreads) {
        const int r = i / D, d = i % D;
        p.part_o[(((size_t)b * p.num_qo_heads + qh0 + r) * p.num_splits + split) * D + d] = 0.f;
      }
      for (int r = tid; r < gs; r += kThreads)
        p.part_lse[((size_t)b * p.num_qo_heads + qh0 + r) * p.num_splits + split] = -INFINITY;
    }
    return;
  }
  const int n_iter = (end - start + kStageTokens - 1) / kStageTokens;
  // Launched as a programmatic dependent of this step's append (programmatic_tail_tokens > 0): every stage
  // before the one holding the first appended token is read without waiting; griddepcontrol.wait (the
  // append's completion and memory) comes before that stage's copies. Without PDL it returns at once.
  const int first_wait_iter = p.pdl_tail_tokens > 0 ? max(0, (len - p.pdl_tail_tokens - start) / kStageTokens) : 0;
  auto wait_if_tail = [&](int iter) {
    if (iter == first_wait_iter) ptx::griddep_wait();
  };

  // Q first: its loads must not queue behind the pipeline's (all CTAs start together, and one sequential
  // load per row behind megabytes of cache copies cost ~15 us per CTA). 16-byte vectors, all in flight.
  constexpr int kQVecPerRow = D / 8;
  constexpr int kQVecsAll = 16 * kQVecPerRow;
  constexpr int kQVecs = (kQVecsAll + kThreads - 1) / kThreads;  // per thread: 2 (D = 128, 4 warps) or 1
  // Vector idx exists (all do unless 16 warps at D = 128: the upper half of the CTA holds none).
  auto q_vec_ok = [&](int idx) { return kQVecs * kThreads == kQVecsAll || idx < kQVecsAll; };
  uint4 qv[kQVecs];
#pragma unroll
  for (int i = 0; i < kQVecs; ++i) {
    const int idx = tid + i * kThreads, r = idx / kQVecPerRow, c = idx % kQVecPerRow;
    qv[i] = make_uint4(0u, 0u, 0u, 0u);
    if (q_vec_ok(idx) && r < gs)
      qv[i] = __ldg(reinterpret_cast<const uint4*>(p.q) + ((size_t)b * p.num_qo_heads + qh0 + r) * kQVecPerRow + c);
  }

  // Then start the pipeline, so the Q set-up below overlaps the first copies.
  const long long row_off = (long long)b * p.max_pages_per_seq;
  const uint8_t* k_head = p.k_cache + (long long)kvh * p.k_tile_bytes;
  const uint8_t* v_head = p.v_cache + (long long)kvh * p.v_tile_bytes;
  // Each warp copies and consumes only its own block16 of every stage (its own cp.async groups, __syncwarp):
  // no block barrier in the loop, and a block16 costs one page lookup (a shuffle) and a page base.
  PageCursor pages;
  pages.init(p, row_off, (start + warp * kBlockTokens) >> p.page_size_log2, lane);
  const int page_mask = (1 << p.page_size_log2) - 1;
  auto load_iter = [&](int iter, uint8_t* stage) {
    const int t = start + iter * kStageTokens + warp * kBlockTokens;
    if (t < end) {  // a block16 wholly past the end is not read (a partial one lies inside its page)
      const long long pg = pages.page(t >> p.page_size_log2, lane);
      load_block16<KF, VF, D, W>(p, stage, k_head + pg * p.k_page_stride, v_head + pg * p.v_page_stride, t & page_mask,
                                 warp, lane);
    }
  };
#pragma unroll
  for (int st = 0; st < S::kStages - 1; ++st) {
    if (st < n_iter) {
      wait_if_tail(st);
      load_iter(st, smem + st * S::kStageBytes);
    }
    cp_async_commit();
  }
  decode_stamp(kDecTlIssued);

  // ---- Q: rows (heads) >= group_size are zero; quantized caches compute in fp16 with Q scaled by 2^e.
  // Thread values: vector i is row idx / kQVecPerRow, dims 8 * (idx % kQVecPerRow) .. +7 (idx = tid + i * kThreads),
  // kept in registers for the set-up reductions and staged as float in q_s for the B fragments.
  float qf[kQVecs][8];
#pragma unroll
  for (int i = 0; i < kQVecs; ++i) {
    const int idx = tid + i * kThreads;
    const uint32_t w[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 f;
      if (p.q_is_fp16)
        f = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
      else
        f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
      qf[i][2 * k] = f.x;
      qf[i][2 * k + 1] = f.y;
    }
    if (q_vec_ok(idx)) {
#pragma unroll
      for (int k = 0; k < 8; k += 4)
        *reinterpret_cast<float4*>(q_s + idx * 8 + k) = make_float4(qf[i][k], qf[i][k + 1], qf[i][k + 2], qf[i][k + 3]);
    }
  }
  if constexpr (QDEC_DECODE_TIMELINE) {  // thread 0's Q values have arrived (the asm orders them before the stamp)
    asm volatile("" ::"f"(qf[0][0]));
    decode_stamp(kDecTlQ);
  }
  float q_factor = 1.f;
  if constexpr (kQuantK) {
    float amax = 0.f;  // over this thread's own values, then the warp, then the CTA
#pragma unroll
    for (int i = 0; i < kQVecs; ++i)
#pragma unroll
      for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(qf[i][k]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) red_s[warp] = amax;
    __syncthreads();
    float wmax[kWarps];  // pairwise tree over the warps
#pragma unroll
    for (int w = 0; w < kWarps; ++w) wmax[w] = red_s[w];
#pragma unroll
    for (int st = 1; st < kWarps; st *= 2)
#pragma unroll
      for (int w = 0; w + st < kWarps; w += 2 * st) wmax[w] = fmaxf(wmax[w], wmax[w + st]);
    amax = wmax[0];
    if (amax > 0.f && amax <= 3.0e38f) {
      int ex;
      frexpf(amax, &ex);  // amax < 2^ex
      q_factor = ldexpf(1.f, max(-126, min(126, 14 - ex)));
    }
    // Per-group sums of the fp16 Q (exactly what the MMA sees), for the folded bias terms. A thread's 8 values
    // lie in one group (groups are >= 16 dims wide), and the kGW / 8 lanes holding one group of one row are
    // adjacent and aligned: shuffles reduce them (no shared-memory atomics, no zeroing barrier).
    constexpr int kGW = D / KF::kGroups;
    constexpr int kLanesPerGroup = kGW / 8;
    static_assert(kLanesPerGroup >= 1 && kLanesPerGroup <= kQVecPerRow && kQVecPerRow <= 32, "Q lane map");
#pragma unroll
    for (int i = 0; i < kQVecs; ++i) {
      const int idx = tid + i * kThreads, r = idx / kQVecPerRow, c = idx % kQVecPerRow;
      float acc = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) acc += __half2float(__float2half_rn(qf[i][k] * q_factor));
#pragma unroll
      for (int o = 1; o < kLanesPerGroup; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (q_vec_ok(idx) && c % kLanesPerGroup == 0) qsum_s[(c / kLanesPerGroup) * 16 + r] = acc;
    }
  }
  __syncthreads();
  // B fragments of Q^T for every k-step and head tile: k = dims 16j + 2tig (+8), n = head 8nh + g.
  uint32_t qb[NF][NH][2];
#pragma unroll
  for (int j = 0; j < NF; ++j)
#pragma unroll
    for (int nh = 0; nh < NH; ++nh) {
      const float* r0 = q_s + (8 * nh + g) * D + 16 * j + 2 * tig;
      if constexpr (kBF16) {
        qb[j][nh][0] = pack_bf16(r0[0], r0[1]);
        qb[j][nh][1] = pack_bf16(r0[8], r0[9]);
      } else {
        qb[j][nh][0] = pack_f16(r0[0] * q_factor, r0[1] * q_factor);
        qb[j][nh][1] = pack_f16(r0[8] * q_factor, r0[9] * q_factor);
      }
    }
  // int4 K with 2, 4 or 8 scale groups (kKPair): S^T sums each group's scale times its accumulator (one FMA per
  // register) and adds every group's shift times its Q sum by one MMA per block16: A = the shifts (row: token, k =
  // group), B = the Q sums times 2^-kKPairQsumLog2 (k < 8: the fp16 value hi, k >= 8: the fp16 remainder lo, so hi + lo
  // keeps ~22 bits of the fp32 sum; a group's sum of at most 64 values below 2^14 stays below 2^12 in fp16). The
  // scores then carry the factor 2^-kKPairQsumLog2, undone in the softmax scale. Measured against the per-group form
  // (docs/attention.md, session 31, three rounds per call): int4-g8 0.92-0.97x the time on the H200, int4-g4 0.98-1.00x
  // (SmolLM2 0.90-0.92x), int4-g2 0.97-1.01x; on the H100 0.97-1.03x, within its run-to-run spread. Other quantized K:
  // the shift (int4) or magic (int8) term per group and register from the fp32 sums in qsum_s.
  constexpr int kKPairQsumLog2 = 8;
  [[maybe_unused]] uint32_t qzb[NH][2] = {};  // kKPair: B fragments (k = 2tig, 2tig + 1 / + 8, + 9; n = head g)
  if constexpr (kKPair) {
#pragma unroll
    for (int nh = 0; nh < NH; ++nh) {
      float hi[2], lo[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int grp = 2 * tig + h;
        const float x = grp < KF::kGroups ? qsum_s[grp * 16 + 8 * nh + g] * (1.f / (1 << kKPairQsumLog2)) : 0.f;
        hi[h] = __half2float(__float2half_rn(x));
        lo[h] = x - hi[h];
      }
      qzb[nh][0] = pack_f16(hi[0], hi[1]);
      qzb[nh][1] = pack_f16(lo[0], lo[1]);
    }
  }
  const float score_scale =
      p.sm_scale_log2 / q_factor * (kKPair ? float(1 << kKPairQsumLog2) : 1.f);  // log2-domain softmax scale on S
  // Q sits in the last pipeline buffer: every warp has its fragments before any warp copies into it.
  if constexpr (S::kQInPipe) __syncthreads();
  decode_stamp(kDecTlReady);

  // O^T accumulators: o_acc[mt][nh] = (dims 16mt + g / g+8) x (heads 8nh + 2tig, +1).
  float o_acc[NF][NH][4];
#pragma unroll
  for (int mt = 0; mt < NF; ++mt)
#pragma unroll
    for (int nh = 0; nh < NH; ++nh) o_acc[mt][nh][0] = o_acc[mt][nh][1] = o_acc[mt][nh][2] = o_acc[mt][nh][3] = 0.f;
  // int4 V with 4 or 8 scale groups (kVPair): P^T is built once per block16 and each group's P' is P^T times the
  // group's scales of the lane's B-operand tokens (2tig, 2tig + 1 and + 8), one fp16 multiply per register; the shift
  // sums come from one MMA per block16 whose A rows are the groups' shifts. Other quantized V: P' per group from the
  // fp32 P, and the shift sums (int4) lane by lane. Measured (docs/attention.md, session 30; best of two rounds against
  // the per-group form): int4-g8 0.91-0.96x the time on the H200 and 0.92-0.99x on the H100, int4-g4 0.97-1.01x, the
  // (int8-g32, int4-g4) pair 0.97-1.01x; int4-g2 lost (1.02-1.05x on the H200), so 2 groups keep the per-group form.
  constexpr bool kVPair = VF::kKind == KvKind::kINT4 && VF::kGroups >= 4;
  static_assert(!kVPair || VF::kGroups <= 8, "the shift MMA holds one group per A row g < 8");
  float zsum[VF::kGroups][NH][2];      // int4 V: sum_t P * shift per group and head (lane-partial; kVPair: at the end)
  [[maybe_unused]] float zacc[NH][4];  // kVPair: row g = group g (< kGroups), columns heads 2tig, 2tig + 1
#pragma unroll
  for (int nh = 0; nh < NH; ++nh) zacc[nh][0] = zacc[nh][1] = zacc[nh][2] = zacc[nh][3] = 0.f;
#pragma unroll
  for (int gg = 0; gg < VF::kGroups; ++gg)
#pragma unroll
    for (int nh = 0; nh < NH; ++nh) zsum[gg][nh][0] = zsum[gg][nh][1] = 0.f;
  float m_run[NH][2], l_run[NH][2];
#pragma unroll
  for (int nh = 0; nh < NH; ++nh) m_run[nh][0] = m_run[nh][1] = -INFINITY, l_run[nh][0] = l_run[nh][1] = 0.f;
  // Quantized V: P' = P * s * v_norm with v_norm = 2^-e fixed (per warp) at the first non-zero scale, so
  // P' stays in fp16's normal range whatever the scale's magnitude (fp8 scales are amax/57344). kVPair: v_norm is
  // fixed before the block's exponentials and folded into them (P carries it: P^T is fp16(P * v_norm), and l and the
  // shift sums carry it until the epilogue), so a group's P' is one fp16 multiply of P^T by its scales. There v_norm
  // stays within 2^-4..2^11: P * v_norm <= 2^15 fits fp16; clamped at 2^-4, P' <= 16 * 65504 * 2^-4 for any scale; and
  // a P below 2^-10 turns subnormal only where it weighs < 2^-20 of the block's largest P (>= 1). As on the other
  // paths, P' overflows where a later scale exceeds the one that fixed v_norm by more than 2^12 (docs/attention.md,
  // "Limits"). Measured with kKPair against kKPair alone (session 31, three rounds per call): int4-g4 0.94-0.97x the
  // time at B >= 128 on the H200 and 0.98-0.99x on the H100 (long 128K there 1.03x, still 78-79% of the read ceiling),
  // int4-g8 0.97-1.02x.
  float v_norm = 0.f;
  [[maybe_unused]] float v_ev = 0.f;  // kVPair: log2(v_norm) once fixed, else 0

  // One block16 of this warp. kPartial: some of its 16 tokens are past the end (masked, and their
  // possibly non-finite cache bytes zeroed) — a separate instantiation keeps the masks off the fast path.
  auto process_block = [&](const uint8_t* stage, int nvalid, auto partial_tag) {
    constexpr bool kPartial = decltype(partial_tag)::value;
    const uint8_t* k_lane = stage + warp * KG::kDataBytes + lane * 16;
    [[maybe_unused]] const uint8_t* k_meta = stage + S::kOffKMeta + warp * kBlockTokens * KF::kMetaEntry;
    const uint8_t* v_lane = stage + S::kOffVData + warp * VG::kDataBytes + lane * 16;
    [[maybe_unused]] const uint8_t* v_meta = stage + S::kOffVMeta + warp * kBlockTokens * VF::kMetaEntry;
    const bool tok_ok[2] = {!kPartial || g < nvalid, !kPartial || g + 8 < nvalid};
    // Lanes' V tokens (B operand of P^T): registers 0/1 hold tokens 2tig, 2tig+1; registers 2/3 tokens 2tig+8, 2tig+9.
    uint32_t vmask_lo = 0xffffffffu, vmask_hi = 0xffffffffu;
    if constexpr (kPartial) {
      const int t0 = 2 * tig, t1 = 2 * tig + 8;
      vmask_lo = (t0 < nvalid ? 0x0000ffffu : 0u) | (t0 + 1 < nvalid ? 0xffff0000u : 0u);
      vmask_hi = (t1 < nvalid ? 0x0000ffffu : 0u) | (t1 + 1 < nvalid ? 0xffff0000u : 0u);
    }
    if constexpr (kVPair) {
      if (v_norm == 0.f) {  // warp-uniform: the first block16 with a non-zero V scale fixes v_norm
        float mx = 0.f;
#pragma unroll
        for (int gg = 0; gg < VF::kGroups; ++gg) {
          const uint8_t* e = v_meta + gg * kStageTokens * VF::kMetaEntry + 2 * tig * VF::kMetaEntry;
          const uint2 lo = *reinterpret_cast<const uint2*>(e);
          const uint2 hi = *reinterpret_cast<const uint2*>(e + 8 * VF::kMetaEntry);
          uint32_t s_lo = prmt(lo.x, lo.y, 0x5410) & vmask_lo, s_hi = prmt(hi.x, hi.y, 0x5410) & vmask_hi;
          const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&s_lo));
          const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&s_hi));
          mx = fmaxf(mx, fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y)));
        }
        int n = 0;
        v_norm = warp_v_norm(mx, 65504.f, -4, 11, &n);
        if (v_norm != 0.f) {  // what was summed before (shift sums; P' was 0) takes the factor too
          v_ev = static_cast<float>(n);
#pragma unroll
          for (int nh = 0; nh < NH; ++nh) {
            l_run[nh][0] *= v_norm;
            l_run[nh][1] *= v_norm;
#pragma unroll
            for (int c = 0; c < 4; ++c) zacc[nh][c] *= v_norm;
          }
        }
      }
    }

    // ---- S^T = K Q^T: st[nh] = (tokens g / g+8) x (heads 8nh + 2tig, +1), log2 domain.
    float st[NH][4];
#pragma unroll
    for (int nh = 0; nh < NH; ++nh) st[nh][0] = st[nh][1] = st[nh][2] = st[nh][3] = 0.f;
#pragma unroll
    for (int gg = 0; gg < KF::kGroups; ++gg) {
      // kKChains independent accumulator chains over the group's k-steps (alternate k-steps), summed at the end,
      // instead of one chain of 4-8 dependent MMAs.
      float acc[NH][4], acc2[kKChains][NH][4];
#pragma unroll
      for (int ch = 0; ch < kKChains; ++ch)
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) acc2[ch][nh][0] = acc2[ch][nh][1] = acc2[ch][nh][2] = acc2[ch][nh][3] = 0.f;
#pragma unroll
      for (int jj = 0; jj < KSPG; ++jj) {
        const int j = gg * KSPG + jj;
        uint32_t a[4];
        load_frag<KF>(k_lane, j, a);
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) mma16816<kBF16>(acc2[jj % kKChains][nh], a, qb[j][nh][0], qb[j][nh][1]);
      }
#pragma unroll
      for (int nh = 0; nh < NH; ++nh)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float x = acc2[0][nh][c];
#pragma unroll
          for (int ch = 1; ch < kKChains; ++ch) x += acc2[ch][nh][c];
          acc[nh][c] = x;
        }
      if constexpr (kKPair) {
        // st = sum over groups of s * acc (the code scale and the shifts come after the loop).
        float ks[2];
#pragma unroll
        for (int t = 0; t < 2; ++t)
          ks[t] = __low2float(*reinterpret_cast<const __half2*>(k_meta + gg * kStageTokens * KF::kMetaEntry +
                                                                (g + 8 * t) * KF::kMetaEntry));
#pragma unroll
        for (int nh = 0; nh < NH; ++nh)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            st[nh][c] = gg == 0 ? ks[c >> 1] * acc[nh][c] : fmaf(ks[c >> 1], acc[nh][c], st[nh][c]);
      } else if constexpr (kQuantK) {
        float ks[2], kz[2];
        load_meta2<KF>(k_meta + gg * kStageTokens * KF::kMetaEntry, g, ks, kz);
        // Code scale on the accumulator (token g+8 came in as 16q for int4: one constant per row), and the
        // bias (shift, minus the int8 magic) on sum(Q); the first group assigns (no add of zero).
        const float sc[2] = {ks[0] * KF::kCodeScale, ks[1] * (KF::kCodeScale / KF::kOddRowScale)};
        float bias[2];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          if constexpr (KF::kMagic != 0.f)
            bias[t] = kz[t] - KF::kMagic * ks[t];
          else
            bias[t] = kz[t];
        }
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) {
          [[maybe_unused]] const float2 qs = *reinterpret_cast<const float2*>(qsum_s + gg * 16 + 8 * nh + 2 * tig);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int t = c >> 1;
            float v = sc[t] * acc[nh][c];
            if constexpr (KF::kHasShift || KF::kMagic != 0.f) v += bias[t] * ((c & 1) ? qs.y : qs.x);
            st[nh][c] = gg == 0 ? v : st[nh][c] + v;
          }
        }
      } else {
#pragma unroll
        for (int nh = 0; nh < NH; ++nh)
#pragma unroll
          for (int c = 0; c < 4; ++c) st[nh][c] = acc[nh][c];
      }
    }

    if constexpr (kKPair) {
      // The code scale (token g + 8 came in as 16q), then the shift terms: A row g / g + 8 = token, k = group
      // 2tig, 2tig + 1 (and the same at k + 8, where B holds the remainders). A lane's two groups' entries of one
      // token are one group array apart. Stale entries of masked tokens only reach their own rows (set to -inf).
      constexpr float kt0 = KF::kCodeScale / (1 << kKPairQsumLog2);
      constexpr float kt1 = kt0 / KF::kOddRowScale;
      uint32_t za[4] = {0u, 0u, 0u, 0u};
      if (KF::kGroups >= 8 || 2 * tig < KF::kGroups) {
        const uint8_t* e = k_meta + 2 * tig * kStageTokens * KF::kMetaEntry + g * KF::kMetaEntry;
        const uint8_t* e1 = e + kStageTokens * KF::kMetaEntry;
        za[0] = prmt(*reinterpret_cast<const uint32_t*>(e), *reinterpret_cast<const uint32_t*>(e1), 0x7632);
        za[1] = prmt(*reinterpret_cast<const uint32_t*>(e + 8 * KF::kMetaEntry),
                     *reinterpret_cast<const uint32_t*>(e1 + 8 * KF::kMetaEntry), 0x7632);
        za[2] = za[0];
        za[3] = za[1];
      }
#pragma unroll
      for (int nh = 0; nh < NH; ++nh) {
        st[nh][0] *= kt0;
        st[nh][1] *= kt0;
        st[nh][2] *= kt1;
        st[nh][3] *= kt1;
        mma16816<false>(st[nh], za, qzb[nh][0], qzb[nh][1]);
      }
    }

    // ---- Online softmax over tokens, per head (a head's tokens live in the 8 lanes of one tig).
    // The running max is only raised when a score exceeds it by more than kMaxSlack (log2 units): most
    // blocks then skip the cross-lane max, the alpha exponentials and the rescale of O, and P stays
    // <= 2^kMaxSlack. The result is exact either way (lse = m + log2(l) for whatever m was used).
    constexpr float kMaxSlack = 4.f;
    bool raise = false;
#pragma unroll
    for (int nh = 0; nh < NH; ++nh)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        st[nh][c] *= score_scale;
        if (kPartial && !tok_ok[c >> 1]) st[nh][c] = -INFINITY;
        raise |= st[nh][c] > m_run[nh][c & 1] + kMaxSlack;
      }
    if (__any_sync(0xffffffffu, raise)) {  // warp-uniform
      float alpha[NH][2];
#pragma unroll
      for (int nh = 0; nh < NH; ++nh)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = fmaxf(st[nh][h], st[nh][2 + h]);
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
          const float m_new = fmaxf(m_run[nh][h], mx);
          alpha[nh][h] = m_new == -INFINITY ? 1.f : fast_exp2(m_run[nh][h] - m_new);  // exp2(-inf) = 0
          m_run[nh][h] = m_new;
          l_run[nh][h] *= alpha[nh][h];
        }
#pragma unroll
      for (int mt = 0; mt < NF; ++mt)
#pragma unroll
        for (int nh = 0; nh < NH; ++nh)
#pragma unroll
          for (int c = 0; c < 4; ++c) o_acc[mt][nh][c] *= alpha[nh][c & 1];
      if constexpr (kVPair) {
#pragma unroll
        for (int nh = 0; nh < NH; ++nh)
#pragma unroll
          for (int c = 0; c < 4; ++c) zacc[nh][c] *= alpha[nh][c & 1];
      } else {
#pragma unroll
        for (int gg = 0; gg < VF::kGroups; ++gg)
#pragma unroll
          for (int nh = 0; nh < NH; ++nh) zsum[gg][nh][0] *= alpha[nh][0], zsum[gg][nh][1] *= alpha[nh][1];
      }
    }
    float pr[NH][4];
#pragma unroll
    for (int nh = 0; nh < NH; ++nh)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // kVPair: P * v_norm (v_ev = log2(v_norm), 0 for other formats).
        const float m_use = (m_run[nh][h] == -INFINITY ? 0.f : m_run[nh][h]) - v_ev;
        pr[nh][h] = fast_exp2(st[nh][h] - m_use);
        pr[nh][2 + h] = fast_exp2(st[nh][2 + h] - m_use);
        l_run[nh][h] += pr[nh][h] + pr[nh][2 + h];
      }

    // ---- O^T += V^T P'^T, one B operand (P' transposed by movmatrix) per V scale group.
    [[maybe_unused]] uint32_t pt[NH][2];  // kVPair: P^T (B operand: tokens 2tig, 2tig + 1 / + 8, + 9 of head g)
    if constexpr (kVPair) {
#pragma unroll
      for (int nh = 0; nh < NH; ++nh) {
        pt[nh][0] = movmatrix_trans(pack_f16(pr[nh][0], pr[nh][1]));
        pt[nh][1] = movmatrix_trans(pack_f16(pr[nh][2], pr[nh][3]));
      }
      // Shift sums: A = the groups' shifts (row g: group g, k: the block16's tokens), B = P^T. Each (token, group)
      // meta entry is (scale, shift) in fp16; a lane's two tokens are adjacent entries. Stale entries of masked
      // tokens are zeroed (P is 0 there, but 0 * Inf would not be).
      const uint8_t* e = v_meta + (g < VF::kGroups ? g : 0) * kStageTokens * VF::kMetaEntry + 2 * tig * VF::kMetaEntry;
      const uint2 lo = *reinterpret_cast<const uint2*>(e);
      const uint2 hi = *reinterpret_cast<const uint2*>(e + 8 * VF::kMetaEntry);
      uint32_t za[4];
      za[0] = g < VF::kGroups ? prmt(lo.x, lo.y, 0x7632) & vmask_lo : 0u;
      za[1] = 0u;
      za[2] = g < VF::kGroups ? prmt(hi.x, hi.y, 0x7632) & vmask_hi : 0u;
      za[3] = 0u;
#pragma unroll
      for (int nh = 0; nh < NH; ++nh) mma16816<false>(zacc[nh], za, pt[nh][0], pt[nh][1]);
    }
#pragma unroll
    for (int gg = 0; gg < VF::kGroups; ++gg) {
      uint32_t pb[NH][2];
      if constexpr (kVPair) {
        const uint8_t* e = v_meta + gg * kStageTokens * VF::kMetaEntry + 2 * tig * VF::kMetaEntry;
        const uint2 lo = *reinterpret_cast<const uint2*>(e);
        const uint2 hi = *reinterpret_cast<const uint2*>(e + 8 * VF::kMetaEntry);
        const uint32_t s_lo = prmt(lo.x, lo.y, 0x5410) & vmask_lo, s_hi = prmt(hi.x, hi.y, 0x5410) & vmask_hi;
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) {
          pb[nh][0] = hmul2_u32(pt[nh][0], s_lo);
          pb[nh][1] = hmul2_u32(pt[nh][1], s_hi);
        }
      } else if constexpr (VF::kQuant) {
        float vs[2], vz[2];
        load_meta2<VF>(v_meta + gg * kStageTokens * VF::kMetaEntry, g, vs, vz);
        if constexpr (kPartial) {
#pragma unroll
          for (int t = 0; t < 2; ++t)
            if (!tok_ok[t]) vs[t] = vz[t] = 0.f;
        }
        if (v_norm == 0.f) v_norm = warp_v_norm(fmaxf(vs[0], vs[1]), 3.0e38f, -126, 126);  // warp-uniform
        const float s0 = vs[0] * v_norm, s1 = vs[1] * v_norm;
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) {
          pb[nh][0] = movmatrix_trans(pack_f16(pr[nh][0] * s0, pr[nh][1] * s0));
          pb[nh][1] = movmatrix_trans(pack_f16(pr[nh][2] * s1, pr[nh][3] * s1));
          if constexpr (VF::kHasShift) {
            zsum[gg][nh][0] += pr[nh][0] * vz[0] + pr[nh][2] * vz[1];
            zsum[gg][nh][1] += pr[nh][1] * vz[0] + pr[nh][3] * vz[1];
          }
        }
      } else {
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) {
          if constexpr (kBF16) {
            pb[nh][0] = movmatrix_trans(pack_bf16(pr[nh][0], pr[nh][1]));
            pb[nh][1] = movmatrix_trans(pack_bf16(pr[nh][2], pr[nh][3]));
          } else {
            pb[nh][0] = movmatrix_trans(pack_f16(pr[nh][0], pr[nh][1]));
            pb[nh][1] = movmatrix_trans(pack_f16(pr[nh][2], pr[nh][3]));
          }
        }
      }
#pragma unroll
      for (int mm = 0; mm < MTPG; ++mm) {
        const int mt = gg * MTPG + mm;
        uint32_t a[4];
        load_frag<VF>(v_lane, mt, a);
        // The magic is subtracted exactly per register: folding it into a sum of P' over the sequence
        // (as K does per token) cancels ~1024x in the tensor-core accumulator and cost 2x the error at 8K
        // tokens (measured: rel L2 3.7e-3 vs 1.5e-3).
        if constexpr (VF::kMagic != 0.f) {
          const uint32_t magic = 0x64806480u;  // 1152 (int8)
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = hsub2_u32(a[i], magic);
        }
        if constexpr (kPartial) {
          a[0] &= vmask_lo;
          a[1] &= vmask_lo;
          a[2] &= vmask_hi;
          a[3] &= vmask_hi;
        }
#pragma unroll
        for (int nh = 0; nh < NH; ++nh) mma16816<kBF16>(o_acc[mt][nh], a, pb[nh][0], pb[nh][1]);
      }
    }
  };

  // Block16s under 2 KB whose tiles hold at most a stage of tokens: the loop's copies by StridedCopy.
  constexpr bool kStridedCopy = S::kStageBytes / kWarps < 2048;
  const bool strided = kStridedCopy && (1 << p.page_size_log2) <= kStageTokens;
  [[maybe_unused]] StridedCopy<KF, VF, D, W> scopy;
  if constexpr (kStridedCopy) {
    if (strided) {
      const int t0 = start + (S::kStages - 1) * kStageTokens + warp * kBlockTokens;
      scopy.init(p, k_head, v_head, row_off, t0, p.block_table != nullptr, warp, lane);
    }
  }
  int cur_buf = 0, next_buf = S::kStages - 1;  // ring-buffer indices (no modulo in the loop)
  for (int it = 0; it < n_iter; ++it) {
    // This warp's copies of stage `it` have landed (its own groups), and all its lanes are done with the
    // buffer it refills next (its own block16 of the previous iteration).
    cp_async_wait<S::kStages - 2>();
    __syncwarp();
    if (QDEC_DECODE_TIMELINE && it == 0) decode_stamp(kDecTlFirst);
    {
      const int nxt = it + S::kStages - 1;
      if (strided) {
        if constexpr (kStridedCopy) {
          if (nxt < n_iter) wait_if_tail(nxt);
          if (p.block_table)
            scopy.issue_paged(smem + next_buf * S::kStageBytes, end, p, k_head, v_head, pages, warp, lane);
          else
            scopy.issue(smem + next_buf * S::kStageBytes, end, warp, lane);
        }
      } else if (nxt < n_iter) {
        wait_if_tail(nxt);
        load_iter(nxt, smem + next_buf * S::kStageBytes);
      }
      cp_async_commit();
      next_buf = next_buf == S::kStages - 1 ? 0 : next_buf + 1;
    }
    const uint8_t* stage = smem + cur_buf * S::kStageBytes;
    cur_buf = cur_buf == S::kStages - 1 ? 0 : cur_buf + 1;
    const int nvalid = end - (start + it * kStageTokens + warp * kBlockTokens);
    if (nvalid >= kBlockTokens)
      process_block(stage, nvalid, std::false_type{});
    else if (nvalid > 0)
      process_block(stage, nvalid, std::true_type{});
  }
  cp_async_wait<0>();
  // The split-K merge kernel (launched with programmatic dependent launch) may start its launch now; it
  // waits for this grid's completion (griddepcontrol.wait) before reading the partials.
  ptx::griddep_launch_dependents();
  __syncthreads();
  decode_stamp(kDecTlLoopEnd);

  // ---- Merge the warps: per head m, l, and O (with the int4 shift sums) through shared memory.
  // Exact (powers of two): undo v_norm (kVPair: in l and the shift sums too) and the int4 code scale.
  const float v_inv = (VF::kQuant && v_norm != 0.f) ? 1.f / v_norm : 1.f;
  if constexpr (kVPair) {
#pragma unroll
    for (int nh = 0; nh < NH; ++nh) l_run[nh][0] *= v_inv, l_run[nh][1] *= v_inv;
  }
#pragma unroll
  for (int nh = 0; nh < NH; ++nh)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        l_run[nh][h] += __shfl_xor_sync(0xffffffffu, l_run[nh][h], o);
        if constexpr (!kVPair) {
#pragma unroll
          for (int gg = 0; gg < VF::kGroups; ++gg) zsum[gg][nh][h] += __shfl_xor_sync(0xffffffffu, zsum[gg][nh][h], o);
        }
      }
  if constexpr (kVPair) {  // group gg's sums sit in the lanes of row g = gg
#pragma unroll
    for (int gg = 0; gg < VF::kGroups; ++gg)
#pragma unroll
      for (int nh = 0; nh < NH; ++nh)
#pragma unroll
        for (int h = 0; h < 2; ++h) zsum[gg][nh][h] = __shfl_sync(0xffffffffu, zacc[nh][h], gg * 4 + tig) * v_inv;
  }
  const float o_unnorm = v_inv * VF::kCodeScale;
  float* o_s = reinterpret_cast<float*>(smem);  // [warp][16 heads][S::kORow]
  float* ml_s = o_s + kWarps * 16 * S::kORow;   // m [16][warp], l [16][warp]
#pragma unroll
  for (int mt = 0; mt < NF; ++mt)
#pragma unroll
    for (int nh = 0; nh < NH; ++nh)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int head = 8 * nh + 2 * tig + (c & 1);
        const int dim = 16 * mt + g + 8 * (c >> 1);
        float v = o_acc[mt][nh][c];
        if (c >= 2) v *= 1.f / VF::kOddRowScale;  // dims g+8 came in as 16q (int4)
        o_s[(warp * 16 + head) * S::kORow + dim] = v * o_unnorm + zsum[mt / MTPG][nh][c & 1];
      }
  if (g == 0) {
#pragma unroll
    for (int nh = 0; nh < NH; ++nh)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ml_s[(8 * nh + 2 * tig + h) * kWarps + warp] = m_run[nh][h];
        ml_s[kWarps * 16 + (8 * nh + 2 * tig + h) * kWarps + warp] = l_run[nh][h];
      }
  }
  __syncthreads();
  decode_stamp(kDecTlStaged);
  // Four consecutive dims per thread: float4 shared loads, one 16-byte (partials) or 8-byte (O) store. The warps'
  // weights exp2(m_w - m) / l of a thread's row come from lanes w < kWarps of its half-warp (lane & 15 = warp w:
  // shuffle reductions over those lanes, one reciprocal, a shuffle per warp; the other lanes' m, l and weight are
  // never read), with no barrier between them and the sums (docs/attention.md, session 38). Whole warps iterate
  // (the shuffles); rows are >= 16 vectors, so half-warps are all in or all out; the lse comes from lanes 0 / 16.
  constexpr int kVecsPerRow = D / 4;
  static_assert(kVecsPerRow % 16 == 0 && kWarps <= 16 && (kWarps & (kWarps - 1)) == 0,
                "a half-warp per row segment, a lane per warp, reductions over the first kWarps lanes");
  const int items = gs * kVecsPerRow;
  for (int i0 = warp * 32; i0 < items; i0 += kThreads) {
    const int i = min(i0 + lane, items - 1);
    const int r = i / kVecsPerRow, d = (i % kVecsPerRow) * 4;
    const int w_lane = lane & 15;
    const float mw = w_lane < kWarps ? ml_s[r * kWarps + w_lane] : -INFINITY;
    float m = mw;
#pragma unroll
    for (int o = kWarps / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float e = mw == -INFINITY ? 0.f : exp2f(mw - m);
    float l = w_lane < kWarps ? e * ml_s[kWarps * 16 + r * kWarps + w_lane] : 0.f;
#pragma unroll
    for (int o = kWarps / 2; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    const float wgt = e * (1.f / l);
    float4 out = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = __shfl_sync(0xffffffffu, wgt, (lane & 16) | w);
      const float4 v = *reinterpret_cast<const float4*>(o_s + (w * 16 + r) * S::kORow + d);
      out.x += wt * v.x;
      out.y += wt * v.y;
      out.z += wt * v.z;
      out.w += wt * v.w;
    }
    if (i0 + lane >= items) continue;
    const float lse2 = m + log2f(l);
    const size_t row = (size_t)b * p.num_qo_heads + qh0 + r;
    if (p.num_splits == 1) {
      const uint2 packed = p.q_is_fp16 ? make_uint2(pack_f16(out.x, out.y), pack_f16(out.z, out.w))
                                       : make_uint2(pack_bf16(out.x, out.y), pack_bf16(out.z, out.w));
      *reinterpret_cast<uint2*>(reinterpret_cast<uint16_t*>(p.o) + row * D + d) = packed;
      if (p.lse && d == 0) p.lse[row] = lse2 * 0.69314718055994531f;
    } else {
      *reinterpret_cast<float4*>(p.part_o + (row * p.num_splits + split) * D + d) = out;
      if (d == 0) p.part_lse[row * p.num_splits + split] = lse2;
    }
  }
}

}  // namespace qdec::attention
