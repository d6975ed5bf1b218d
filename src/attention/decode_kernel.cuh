// Fused GQA decode attention over a tiled (contiguous or paged) KV cache in any qdec KV format.
//
//   Q, O  [batch, num_qo_heads, head_dim]            bf16 / fp16
//   K, V  tiles of page_size tokens of one KV head    docs/formats.md (block16 fragment order + meta region)
//   out   num_splits == 1: O (and lse); otherwise partials part_o [batch, num_qo_heads, num_splits, head_dim]
//         and part_lse (log2 domain), merged by decode_merge.cu.
//
// Design
// - One CTA = (split, kv head, sequence): all group_size (<= 16) query heads of the KV head are the M=16 rows
//   of mma.m16n8k16, so every KV byte is read from HBM once. S = Q K^T uses K as the B operand (n = token),
//   O = P V uses V as the B operand (k = token); P stays in registers (the S accumulator layout is the A
//   layout of the second product).
// - 4 warps; a pipeline stage is 64 tokens (one block16 per warp), copied global -> shared with 16-byte
//   cp.async, NSTAGES deep. Every lane then reads its fragments with 16-byte shared loads: the cache stores
//   values in fragment order, so dequantization is register-only (lop3 / prmt / cvt), with no transpose.
// - Quantized formats compute in fp16 on exact codes (int4: 1024+q via the 0x6400 magic, int8: 1152+q,
//   fp8: exact fp16). Scales stay outside the MMA: for K, one accumulator per scale group (a group of 16k
//   dims is whole k-steps) is scaled per token after its k-steps, with the magic offset and the int4 shift
//   folded into a per-token bias times sum(Q over the group); for V, the per-token scale is folded into P
//   (P' = P * s, one P' per group) and the int4 shift into a side sum P * z. Q is brought into fp16 with a
//   power-of-two factor (exact for bf16 inputs), folded into the softmax scale.
// - Online softmax per warp in the log2 domain; warps merge through shared memory at the end.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "qdec/formats.h"

namespace qdec::attention {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStageTokens = kWarps * kBlockTokens;  // 64

struct DecodeKernelParams {
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  const int32_t* block_table;  // nullptr: contiguous (page = b * max_pages_per_seq + t / page_size)
  const int32_t* seq_lens;
  const void* q;
  void* o;
  float* lse;        // optional, natural log
  float* part_o;     // [B, HQ, S, D] when num_splits > 1
  float* part_lse;   // [B, HQ, S] (log2 domain)
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
  // fp16 value of code 0 after the register conversion (the code is q + kMagic exactly).
  static constexpr float kMagic = Kind == KvKind::kINT4 ? 1024.f : (Kind == KvKind::kINT8 ? 1152.f : 0.f);
};

template <class F, int D>
struct BlockGeom {
  static constexpr int kDataBytes = kBlockTokens * D * F::kBits / 8;   // one block16 of values
  static constexpr int kLaneBytes = kDataBytes / 32;
  static constexpr int kChunks = kLaneBytes / 16;                        // 16-byte loads per lane
  static constexpr int kMetaBytes = kBlockTokens * F::kGroups * F::kMetaEntry;  // one block16's scales
};

// ---- Register helpers -------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));  // (a & mask) | bits
  return d;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t cvt_e4m3x2_f16x2(uint32_t two_bytes) {
  uint32_t d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(d) : "r"(two_bytes));
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

template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Fragments f and f+1 (f even) of a lane, converted to MMA registers {f.R0, f.R1, (f+1).R0, (f+1).R1}.
// `lane_base` points at this lane's 16 bytes of chunk 0 of the block16 in shared memory.
template <class F>
__device__ __forceinline__ void load_frag_pair(const uint8_t* lane_base, int f, uint32_t (&r)[4]) {
  constexpr int kFragBytes = F::kBits / 2;  // 4 values
  const int byte = f * kFragBytes;
  const uint8_t* p = lane_base + (byte / 16) * 512 + (byte % 16);
  if constexpr (F::kBits == 16) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
  } else if constexpr (F::kBits == 8) {
    uint2 v = *reinterpret_cast<const uint2*>(p);
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
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    r[0] = lop3_and_or(w, 0x000F000Fu, 0x64006400u);
    r[1] = lop3_and_or(w >> 4, 0x000F000Fu, 0x64006400u);
    r[2] = lop3_and_or(w >> 8, 0x000F000Fu, 0x64006400u);
    r[3] = lop3_and_or(w >> 12, 0x000F000Fu, 0x64006400u);
  }
}

// Scales of this lane's 4 tokens {2tig, 2tig+1, 2tig+8, 2tig+9} for one group of a block16.
// `meta` points at the group's 16 entries in shared memory.
template <class F>
__device__ __forceinline__ void load_meta4(const uint8_t* meta, int tig, float (&s)[4], float (&z)[4]) {
  if constexpr (F::kKind == KvKind::kINT4) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint2 v = *reinterpret_cast<const uint2*>(meta + (8 * h + 2 * tig) * 4);
      float2 a = __half22float2(*reinterpret_cast<__half2*>(&v.x));
      float2 b = __half22float2(*reinterpret_cast<__half2*>(&v.y));
      s[2 * h] = a.x; z[2 * h] = a.y; s[2 * h + 1] = b.x; z[2 * h + 1] = b.y;
    }
  } else if constexpr (F::kKind == KvKind::kINT8) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t v = *reinterpret_cast<const uint32_t*>(meta + (8 * h + 2 * tig) * 2);
      float2 a = __half22float2(*reinterpret_cast<__half2*>(&v));
      s[2 * h] = a.x; s[2 * h + 1] = a.y; z[2 * h] = 0.f; z[2 * h + 1] = 0.f;
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float2 a = *reinterpret_cast<const float2*>(meta + (8 * h + 2 * tig) * 4);
      s[2 * h] = a.x; s[2 * h + 1] = a.y; z[2 * h] = 0.f; z[2 * h + 1] = 0.f;
    }
  }
}

template <class KF, class VF, int D>
struct DecodeSmem {
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  static constexpr int kStageBytes = kWarps * (KG::kDataBytes + VG::kDataBytes + KG::kMetaBytes + VG::kMetaBytes);
  static constexpr int kStages = kStageBytes <= 12 * 1024 ? 6 : (kStageBytes <= 20 * 1024 ? 4 : 3);
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kCombineBytes = kWarps * 16 * D * 4 + 2 * kWarps * 16 * 4;
  static constexpr int kQBytes = 16 * D * 4 + KF::kGroups * 16 * 4 + 64;
  static constexpr int kBytes = (kPipeBytes > kCombineBytes ? kPipeBytes : kCombineBytes) + kQBytes;
  // Offsets inside one stage.
  static constexpr int kOffVData = kWarps * KG::kDataBytes;
  static constexpr int kOffKMeta = kOffVData + kWarps * VG::kDataBytes;
  static constexpr int kOffVMeta = kOffKMeta + kWarps * KG::kMetaBytes;
};

// Copy the 64 tokens starting at `tok0` of (sequence b, kv head) into a pipeline stage. Block16s that start
// at or past `end` are not copied (their warps skip them).
template <class KF, class VF, int D>
__device__ __forceinline__ void load_stage(const DecodeKernelParams& p, uint8_t* stage, int b, int kvh, int tok0,
                                           int end) {
  using S = DecodeSmem<KF, VF, D>;
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  const int page_size = 1 << p.page_size_log2;
  auto tile_of = [&](int t, const uint8_t* cache, long long page_stride, int tile_bytes) {
    const int lp = t >> p.page_size_log2;
    const long long page = p.block_table ? (long long)p.block_table[(long long)b * p.max_pages_per_seq + lp]
                                         : (long long)b * p.max_pages_per_seq + lp;
    return cache + page * page_stride + (long long)kvh * tile_bytes;
  };
  // Values: kWarps block16s x kDataBytes/16 chunks for K, then for V.
  constexpr int kKChunks = KG::kDataBytes / 16, kVChunks = VG::kDataBytes / 16;
#pragma unroll 4
  for (int c = threadIdx.x; c < kWarps * (kKChunks + kVChunks); c += kThreads) {
    const bool is_v = c >= kWarps * kKChunks;
    const int cc = is_v ? c - kWarps * kKChunks : c;
    const int per = is_v ? kVChunks : kKChunks;
    const int blk = cc / per, within = cc % per;
    const int t = tok0 + blk * kBlockTokens;
    if (t >= end) continue;
    const uint8_t* tile = is_v ? tile_of(t, p.v_cache, p.v_page_stride, p.v_tile_bytes)
                               : tile_of(t, p.k_cache, p.k_page_stride, p.k_tile_bytes);
    const int data_bytes = is_v ? VG::kDataBytes : KG::kDataBytes;
    const uint8_t* src = tile + (size_t)((t & (page_size - 1)) / kBlockTokens) * data_bytes + within * 16;
    uint8_t* dst = stage + (is_v ? S::kOffVData : 0) + blk * data_bytes + within * 16;
    cp_async16(dst, src);
  }
  // Scales: per block16 and group, 16 entries (entry bytes = 16-byte chunks per group).
  constexpr int kKMetaChunks = KG::kMetaBytes / 16, kVMetaChunks = VG::kMetaBytes / 16;
  if constexpr (kKMetaChunks + kVMetaChunks > 0) {
    for (int c = threadIdx.x; c < kWarps * (kKMetaChunks + kVMetaChunks); c += kThreads) {
      const bool is_v = c >= kWarps * kKMetaChunks;
      const int cc = is_v ? c - kWarps * kKMetaChunks : c;
      const int per = is_v ? kVMetaChunks : kKMetaChunks;
      const int blk = cc / per, within = cc % per;
      const int t = tok0 + blk * kBlockTokens;
      if (t >= end) continue;
      const int entry = is_v ? VF::kMetaEntry : KF::kMetaEntry;
      const int per_group = entry;  // 16 entries * entry bytes / 16
      const int g = within / per_group, wc = within % per_group;
      const uint8_t* tile = is_v ? tile_of(t, p.v_cache, p.v_page_stride, p.v_tile_bytes)
                                 : tile_of(t, p.k_cache, p.k_page_stride, p.k_tile_bytes);
      const int data_per_token = is_v ? VG::kDataBytes / kBlockTokens : KG::kDataBytes / kBlockTokens;
      const uint8_t* src = tile + (size_t)page_size * data_per_token +
                           (size_t)(g * page_size + (t & (page_size - 1))) * entry + wc * 16;
      uint8_t* dst = stage + (is_v ? S::kOffVMeta : S::kOffKMeta) +
                     blk * (is_v ? VG::kMetaBytes : KG::kMetaBytes) + within * 16;
      cp_async16(dst, src);
    }
  }
}

template <class KF, class VF, int D>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(const __grid_constant__ DecodeKernelParams p) {
  using S = DecodeSmem<KF, VF, D>;
  using KG = BlockGeom<KF, D>;
  using VG = BlockGeom<VF, D>;
  constexpr bool kBF16 = KF::kBF16;      // MMA type: bf16 only for a bf16 cache, else fp16
  constexpr bool kQuantK = KF::kQuant;
  constexpr int KS = D / 16;             // k-steps of Q K^T
  constexpr int NT = D / 8;              // n-tiles of P V
  constexpr int KSPG = KS / KF::kGroups; // k-steps per K group
  constexpr int NTPG = NT / VF::kGroups; // n-tiles per V group
  static_assert(KSPG >= 1 && NTPG >= 1, "group narrower than an MMA tile");
  static_assert(!KF::kBF16 || VF::kBF16, "a bf16 K cache needs a bf16 V cache");

  extern __shared__ __align__(16) uint8_t smem[];
  float* q_s = reinterpret_cast<float*>(smem + (S::kBytes - S::kQBytes));  // [16][D]
  float* qsum_s = q_s + 16 * D;                                            // [KG][16]
  float* red_s = qsum_s + KF::kGroups * 16;                                // scratch

  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int len = p.seq_lens[b];
  const int gs = p.group_size;
  const int qh0 = kvh * gs;

  // Split range: a multiple of the stage size so only the last stage of a sequence is partial.
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

  // Start the pipeline first, so the Q set-up below overlaps the first copies.
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < n_iter) load_stage<KF, VF, D>(p, smem + s * S::kStageBytes, b, kvh, start + s * kStageTokens, end);
    cp_async_commit();
  }

  // ---- Q: rows >= group_size are zero; quantized caches compute in fp16 with Q scaled by 2^e.
  for (int i = tid; i < 16 * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float v = 0.f;
    if (r < gs) {
      const size_t idx = ((size_t)b * p.num_qo_heads + qh0 + r) * D + d;
      v = p.q_is_fp16 ? __half2float(reinterpret_cast<const __half*>(p.q)[idx])
                      : __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p.q)[idx]);
    }
    q_s[i] = v;
  }
  float q_factor = 1.f;
  if constexpr (kQuantK || !kBF16) {
    float amax = 0.f;
    for (int i = tid; i < 16 * D; i += kThreads) amax = fmaxf(amax, fabsf(q_s[i]));
    __syncthreads();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) red_s[warp] = amax;
    __syncthreads();
    amax = fmaxf(fmaxf(red_s[0], red_s[1]), fmaxf(red_s[2], red_s[3]));
    if (kQuantK && amax > 0.f && amax <= 3.0e38f) {
      int ex;
      frexpf(amax, &ex);  // amax < 2^ex
      q_factor = ldexpf(1.f, max(-126, min(126, 14 - ex)));
    }
  }
  __syncthreads();
  // Per-group sums of the fp16 Q (exactly what the MMA sees), for the folded bias terms.
  if constexpr (kQuantK) {
    constexpr int kGW = D / KF::kGroups;
    for (int i = tid; i < 16 * KF::kGroups; i += kThreads) {
      const int gg = i / 16, r = i % 16;
      float acc = 0.f;
      for (int d = 0; d < kGW; ++d) acc += __half2float(__float2half_rn(q_s[r * D + gg * kGW + d] * q_factor));
      qsum_s[gg * 16 + r] = acc;
    }
  }
  // A fragments of Q for every k-step: rows g / g+8, k = 2tig.. / 2tig+8..
  uint32_t qa[KS][4];
#pragma unroll
  for (int j = 0; j < KS; ++j) {
    const float* r0 = q_s + g * D + 16 * j + 2 * tig;
    const float* r1 = q_s + (g + 8) * D + 16 * j + 2 * tig;
    if constexpr (kBF16) {
      qa[j][0] = pack_bf16(r0[0], r0[1]);
      qa[j][1] = pack_bf16(r1[0], r1[1]);
      qa[j][2] = pack_bf16(r0[8], r0[9]);
      qa[j][3] = pack_bf16(r1[8], r1[9]);
    } else {
      qa[j][0] = pack_f16(r0[0] * q_factor, r0[1] * q_factor);
      qa[j][1] = pack_f16(r1[0] * q_factor, r1[1] * q_factor);
      qa[j][2] = pack_f16(r0[8] * q_factor, r0[9] * q_factor);
      qa[j][3] = pack_f16(r1[8] * q_factor, r1[9] * q_factor);
    }
  }
  __syncthreads();
  float qsum[KF::kGroups][2];
#pragma unroll
  for (int gg = 0; gg < KF::kGroups; ++gg) {
    qsum[gg][0] = kQuantK ? qsum_s[gg * 16 + g] : 0.f;
    qsum[gg][1] = kQuantK ? qsum_s[gg * 16 + g + 8] : 0.f;
  }
  const float score_scale = p.sm_scale_log2 / q_factor;  // log2-domain softmax scale on S

  float o_acc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.f;
  float zsum[VF::kGroups][2];  // int4 V: sum_t P * shift, per group and row (lane-partial)
#pragma unroll
  for (int gg = 0; gg < VF::kGroups; ++gg) zsum[gg][0] = zsum[gg][1] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};

  for (int it = 0; it < n_iter; ++it) {
    cp_async_wait<S::kStages - 2>();
    __syncthreads();
    {
      const int nxt = it + S::kStages - 1;
      if (nxt < n_iter)
        load_stage<KF, VF, D>(p, smem + (nxt % S::kStages) * S::kStageBytes, b, kvh, start + nxt * kStageTokens, end);
      cp_async_commit();
    }
    const uint8_t* stage = smem + (it % S::kStages) * S::kStageBytes;
    const int blk_start = start + it * kStageTokens + warp * kBlockTokens;
    const int nvalid = end - blk_start;
    if (nvalid <= 0) continue;  // warp-uniform

    // ---- S = Q K^T for this warp's block16: s[nt][c] = (row g + 8(c>>1), token 8nt + 2tig + (c&1)).
    const uint8_t* k_lane = stage + warp * KG::kDataBytes + lane * 16;
    const uint8_t* k_meta = stage + S::kOffKMeta + warp * KG::kMetaBytes;
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int gg = 0; gg < KF::kGroups; ++gg) {
      float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int jj = 0; jj < KSPG; ++jj) {
        const int j = gg * KSPG + jj;
        uint32_t r[4];
        load_frag_pair<KF>(k_lane, 2 * j, r);  // fragments (j, nt=0) and (j, nt=1)
        mma16816<kBF16>(acc[0], qa[j], r[0], r[1]);
        mma16816<kBF16>(acc[1], qa[j], r[2], r[3]);
      }
      if constexpr (kQuantK) {
        float ks[4], kz[4];
        load_meta4<KF>(k_meta + gg * kBlockTokens * KF::kMetaEntry, tig, ks, kz);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int ti = 2 * nt + (c & 1);  // index into this lane's 4 tokens
            const float bias = kz[ti] - KF::kMagic * ks[ti];
            s[nt][c] += ks[ti] * acc[nt][c] + bias * qsum[gg][c >> 1];
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[nt][c] = acc[nt][c];
      }
    }
    // Mask tokens past the end, scale into the log2 domain, online softmax.
    float rmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int t = 8 * nt + 2 * tig + (c & 1);
        float v = s[nt][c] * score_scale;
        if (t >= nvalid) v = -INFINITY;
        s[nt][c] = v;
        rmax[c >> 1] = fmaxf(rmax[c >> 1], v);
      }
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], 1));
      rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], 2));
      const float m_new = fmaxf(m_run[r], rmax[r]);
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = exp2f(m_run[r] - m_use[r]);
      m_run[r] = m_new;
    }
    float pr[2][4];
    float lsum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        pr[nt][c] = exp2f(s[nt][c] - m_use[c >> 1]);
        lsum[c >> 1] += pr[nt][c];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + lsum[r];
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o_acc[n][0] *= alpha[0]; o_acc[n][1] *= alpha[0];
        o_acc[n][2] *= alpha[1]; o_acc[n][3] *= alpha[1];
      }
#pragma unroll
      for (int gg = 0; gg < VF::kGroups; ++gg) { zsum[gg][0] *= alpha[0]; zsum[gg][1] *= alpha[1]; }
    }

    // ---- O += P V. Lane tokens {2tig, 2tig+1, 2tig+8, 2tig+9} = pr[0][0|1], pr[1][0|1] (row g) etc.
    const uint8_t* v_lane = stage + S::kOffVData + warp * VG::kDataBytes + lane * 16;
    const uint8_t* v_meta = stage + S::kOffVMeta + warp * VG::kMetaBytes;
    // Tokens past the end may hold anything (even NaN): zero their V values and scales.
    const bool partial = nvalid < kBlockTokens;
    uint32_t vmask0 = 0xffffffffu, vmask1 = 0xffffffffu;
    if (partial) {
      const int t0 = 2 * tig, t1 = 2 * tig + 8;
      vmask0 = (t0 < nvalid ? 0x0000ffffu : 0u) | (t0 + 1 < nvalid ? 0xffff0000u : 0u);
      vmask1 = (t1 < nvalid ? 0x0000ffffu : 0u) | (t1 + 1 < nvalid ? 0xffff0000u : 0u);
    }
#pragma unroll
    for (int gg = 0; gg < VF::kGroups; ++gg) {
      uint32_t pa[4];
      if constexpr (VF::kQuant) {
        float vs[4], vz[4];
        load_meta4<VF>(v_meta + gg * kBlockTokens * VF::kMetaEntry, tig, vs, vz);
        if (partial) {
#pragma unroll
          for (int ti = 0; ti < 4; ++ti) {
            const int t = (ti >> 1) * 8 + 2 * tig + (ti & 1);
            if (t >= nvalid) vs[ti] = vz[ti] = 0.f;
          }
        }
        pa[0] = pack_f16(pr[0][0] * vs[0], pr[0][1] * vs[1]);
        pa[1] = pack_f16(pr[0][2] * vs[0], pr[0][3] * vs[1]);
        pa[2] = pack_f16(pr[1][0] * vs[2], pr[1][1] * vs[3]);
        pa[3] = pack_f16(pr[1][2] * vs[2], pr[1][3] * vs[3]);
        if constexpr (VF::kHasShift) {
          zsum[gg][0] += pr[0][0] * vz[0] + pr[0][1] * vz[1] + pr[1][0] * vz[2] + pr[1][1] * vz[3];
          zsum[gg][1] += pr[0][2] * vz[0] + pr[0][3] * vz[1] + pr[1][2] * vz[2] + pr[1][3] * vz[3];
        }
      } else if constexpr (kBF16) {
        pa[0] = pack_bf16(pr[0][0], pr[0][1]);
        pa[1] = pack_bf16(pr[0][2], pr[0][3]);
        pa[2] = pack_bf16(pr[1][0], pr[1][1]);
        pa[3] = pack_bf16(pr[1][2], pr[1][3]);
      } else {
        pa[0] = pack_f16(pr[0][0], pr[0][1]);
        pa[1] = pack_f16(pr[0][2], pr[0][3]);
        pa[2] = pack_f16(pr[1][0], pr[1][1]);
        pa[3] = pack_f16(pr[1][2], pr[1][3]);
      }
#pragma unroll
      for (int nn = 0; nn < NTPG; nn += 2) {
        const int n = gg * NTPG + nn;
        uint32_t r[4];
        load_frag_pair<VF>(v_lane, n, r);
        if constexpr (VF::kMagic != 0.f) {
          const uint32_t magic = VF::kKind == KvKind::kINT4 ? 0x64006400u : 0x64806480u;  // 1024 / 1152
#pragma unroll
          for (int i = 0; i < 4; ++i) r[i] = hsub2_u32(r[i], magic);
        }
        if (partial) { r[0] &= vmask0; r[1] &= vmask1; r[2] &= vmask0; r[3] &= vmask1; }
        mma16816<kBF16>(o_acc[n], pa, r[0], r[1]);
        if (nn + 1 < NTPG) mma16816<kBF16>(o_acc[n + 1], pa, r[2], r[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- Merge the 4 warps: per row m, l, and O (with the int4 shift sums) through shared memory.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
#pragma unroll
    for (int gg = 0; gg < VF::kGroups; ++gg) {
      zsum[gg][r] += __shfl_xor_sync(0xffffffffu, zsum[gg][r], 1);
      zsum[gg][r] += __shfl_xor_sync(0xffffffffu, zsum[gg][r], 2);
    }
  }
  float* o_s = reinterpret_cast<float*>(smem);   // [warp][16][D]
  float* ml_s = o_s + kWarps * 16 * D;           // m [warp][16], l [warp][16]
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int gg = n / NTPG;
    const int col = 8 * n + 2 * tig;
    float2 lo = make_float2(o_acc[n][0] + zsum[gg][0], o_acc[n][1] + zsum[gg][0]);
    float2 hi = make_float2(o_acc[n][2] + zsum[gg][1], o_acc[n][3] + zsum[gg][1]);
    *reinterpret_cast<float2*>(o_s + (warp * 16 + g) * D + col) = lo;
    *reinterpret_cast<float2*>(o_s + (warp * 16 + g + 8) * D + col) = hi;
  }
  if (tig == 0) {
    ml_s[warp * 16 + g] = m_run[0];
    ml_s[warp * 16 + g + 8] = m_run[1];
    ml_s[kWarps * 16 + warp * 16 + g] = l_run[0];
    ml_s[kWarps * 16 + warp * 16 + g + 8] = l_run[1];
  }
  __syncthreads();
  for (int i = tid; i < gs * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, ml_s[w * 16 + r]);
    float l = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = ml_s[w * 16 + r];
      const float e = mw == -INFINITY ? 0.f : exp2f(mw - m);
      l += e * ml_s[kWarps * 16 + w * 16 + r];
      acc += e * o_s[(w * 16 + r) * D + d];
    }
    const float out = acc / l;
    const float lse2 = m + log2f(l);
    const size_t row = (size_t)b * p.num_qo_heads + qh0 + r;
    if (p.num_splits == 1) {
      if (p.q_is_fp16) reinterpret_cast<__half*>(p.o)[row * D + d] = __float2half_rn(out);
      else reinterpret_cast<__nv_bfloat16*>(p.o)[row * D + d] = __float2bfloat16_rn(out);
      if (p.lse && d == 0) p.lse[row] = lse2 * 0.69314718055994531f;
    } else {
      p.part_o[(row * p.num_splits + split) * D + d] = out;
      if (d == 0) p.part_lse[row * p.num_splits + split] = lse2;
    }
  }
}

}  // namespace qdec::attention
