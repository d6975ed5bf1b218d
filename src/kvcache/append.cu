// Fused append: RoPE on new K rows, dynamic per-(token, head) quantization of K and V, and the scattered
// writes into pages of the pool (layout in include/qdec/kv_cache.h, byte order in docs/formats.md).
//
//   k, v   [num_tokens, num_kv_heads, head_dim] bf16/fp16     pool [num_pages][K tiles][V tiles]
//
// One warp per (new token, KV head, K or V); lane l holds dims [l * VPL, (l + 1) * VPL), VPL = head_dim / 32,
// so a scale group is a run of whole lanes and its reductions are xor shuffles inside the run (one redux for
// a whole-row group). The rounding follows the CPU quantizer step by step (same IEEE division, same fp16/fp8
// conversions), so the bytes are identical; RoPE comes from kvcache/rope.h, shared with the CPU. Values land
// in tensor-core fragment order (formats/tile_position.h): 16- and 8-bit values are plain stores; an int4 V
// byte holds dims d and d + 8 of one token (combined through a shuffle); an int4 K byte holds tokens t and
// t + 8 of one dim, so K nibbles are cleared and set with word atomics (no read, no race with the warp of
// t ^ 8 in a prefill), one lane per word.
// An append is well under 1 MB: the kernel is latency-bound, and what bounds it is each warp's chain of
// dependent latencies. So the warps share nothing (no block barrier), every load that does not depend on
// the position is issued first (the row, start_pos, the rotary frequencies), and the chain after it has no
// branch that would serialize independent work (the sin / cos of a lane's pairs, its divisions).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "formats/tile_position.h"
#include "kvcache/append_internal.h"
#include "kvcache/rope.h"
#include "runtime/cuda_check.h"
#include "runtime/ptx.cuh"

namespace qdec::kvcache {
namespace {

constexpr int kWarpsPerBlock = 4;  // K and V warps of kWarpsPerBlock / 2 tokens of one head
constexpr int kMaxRotaryPairs = 128;

struct Side {           // K or V of the pool
  int kind;             // KvKind
  int lanes_per_group;  // 32 / scale groups per row: the lanes that share a scale
  int bits;             // 16, 8, 4
  int tile_bytes;       // one head's tile
  int meta_offset;      // start of the scales inside a tile
  int data_bytes_row;   // head_dim * bits / 8
  long long base;       // offset of head 0's tile inside a page (0 for K, k_bytes_per_page for V)
};

struct AppendKernelParams {
  const uint16_t* k;
  const uint16_t* v;
  uint8_t* pool;
  const int32_t* cu_seqlens;  // nullptr: one token per sequence
  const int32_t* start_pos;
  const int32_t* block_table;  // nullptr: identity
  long long page_bytes;
  Side side[2];  // [0] K, [1] V
  int page_size_log2;
  int max_pages_per_seq;
  int num_kv_heads;
  int num_tokens;
  int batch;
  int is_fp16;
  int rope_style;  // 0 none, 1 half, 2 interleaved
  int rotary_dim;
  float fp8_static_scale;
  double inv_freq[kMaxRotaryPairs];
};

__device__ __forceinline__ float to_float(uint16_t bits, bool fp16) {
  return fp16 ? __half2float(__ushort_as_half(bits)) : __bfloat162float(__ushort_as_bfloat16(bits));
}

// fp16 rounding with finite overflow clamped to +-65504 (the scales' rule, docs/formats.md).
__device__ __forceinline__ float fp16_satfinite(float x) {
  const __half h = __float2half_rn(x);
  if (__hisinf(h)) return x > 0.f ? 65504.f : -65504.f;
  return __half2float(h);
}

// Min / max run in the order where -0 < +0 (as the CPU quantizer), so any reduction order gives the same
// bits. ordered_bits maps that order onto unsigned integers (-inf lowest, -0 just below +0, +inf highest; no
// NaN comes here): a lane's values reduce with integer min / max, and a whole-warp group with one redux
// instead of five shuffle rounds.
__device__ __forceinline__ uint32_t ordered_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// |v| in [2^-60, 2^61): a normal float far from overflow and underflow.
__device__ __forceinline__ bool moderate(float v) {
  return static_cast<uint32_t>(((__float_as_uint(v) >> 23) & 0xFFu) - 67u) <= 120u;
}

// q[j] = a[j] / s (s > 0), rounded as IEEE division (the fp8 quantizer's x / scale). nvcc's `/` runs a fast
// path (a refined reciprocal, the quotient, one fma correction) guarded per division by a range check and a
// branch to a slow path, which serializes the lane's divisions. Here the lane's divisions share one
// reciprocal and run side by side, and one conservative check covers them all: s and every nonzero a
// moderate, where the fast path is exact (a zero a gives a, the sign of IEEE's 0 / s). Lanes outside it
// (rows with huge values, Inf or NaN) take `/`. Measured in a graph (H200, B = 512): fp8 3.39 -> 3.18 us;
// int8 and int4, whose `/` has no branch around it, measured as fast or faster with plain `/`.
template <int VPL>
__device__ __forceinline__ void divide_lane(const float (&a)[VPL], float s, float (&q)[VPL]) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  r = __fmaf_rn(r, __fmaf_rn(-s, r, 1.f), r);
  bool fast = moderate(s);
#pragma unroll
  for (int j = 0; j < VPL; ++j) {
    const float q0 = __fmaf_rn(a[j], r, 0.f);
    q[j] = a[j] == 0.f ? a[j] : __fmaf_rn(r, __fmaf_rn(-s, q0, a[j]), q0);
    fast &= a[j] == 0.f || moderate(a[j]);
  }
  if (!fast) {
#pragma unroll
    for (int j = 0; j < VPL; ++j) q[j] = a[j] / s;
  }
}

// Max over a group of lanes_per_group lanes of non-negative floats (amax), whose order is their bits'.
__device__ __forceinline__ float group_amax(float amax, int lanes_per_group) {
  if (lanes_per_group == 32) return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));
  for (int o = lanes_per_group / 2; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax;
}

template <int VPL>
struct LaneRow {
  uint16_t code[VPL];
  float scale;  // of the lane's group (fp8: the row's)
  float shift;  // int4 only
};

// Quantize the lane's VPL values of one row (docs/formats.md, "Quantizers"); lanes_per_group lanes share
// a scale group.
template <int VPL>
__device__ __forceinline__ void quantize_lanes(int kind, int lanes_per_group, float fp8_static, const float (&x)[VPL],
                                               LaneRow<VPL>& out) {
  out.scale = 1.f;
  out.shift = 0.f;
  if (kind == static_cast<int>(KvKind::kBF16) || kind == static_cast<int>(KvKind::kFP16)) {
#pragma unroll
    for (int j = 0; j < VPL; ++j)
      out.code[j] = kind == static_cast<int>(KvKind::kBF16) ? __bfloat16_as_ushort(__float2bfloat16_rn(x[j]))
                                                            : __half_as_ushort(__float2half_rn(x[j]));
    return;
  }
  if (kind == static_cast<int>(KvKind::kFP8E4M3) || kind == static_cast<int>(KvKind::kFP8E5M2)) {
    const bool e4m3 = kind == static_cast<int>(KvKind::kFP8E4M3);
    float scale = fp8_static;
    if (!(scale > 0.f)) {
      float amax = 0.f;
#pragma unroll
      for (int j = 0; j < VPL; ++j)
        if (isfinite(x[j])) amax = fmaxf(amax, fabsf(x[j]));
      amax = group_amax(amax, 32);
      scale = amax / (e4m3 ? 448.f : 57344.f);
      if (scale == 0.f) scale = 1.f;
    }
    float q[VPL];
    divide_lane<VPL>(x, scale, q);
#pragma unroll
    for (int j = 0; j < VPL; ++j)
      out.code[j] = __nv_cvt_float_to_fp8(q[j], __NV_SATFINITE, e4m3 ? __NV_E4M3 : __NV_E5M2);
    out.scale = scale;
    return;
  }
  if (kind == static_cast<int>(KvKind::kINT8)) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < VPL; ++j)
      if (isfinite(x[j])) amax = fmaxf(amax, fabsf(x[j]));
    amax = group_amax(amax, lanes_per_group);
    const float s = fp16_satfinite(amax / 127.f);
#pragma unroll
    for (int j = 0; j < VPL; ++j) {  // no branch on s, so the lane's divisions overlap; s = 0 selects code 0
      const float q = rintf(x[j] / s);
      const int c = s == 0.f || isnan(q) ? 0 : static_cast<int>(fminf(fmaxf(q, -127.f), 127.f));
      out.code[j] = static_cast<uint8_t>(static_cast<int8_t>(c));
    }
    out.scale = s;
    return;
  }
  // int4: asymmetric over the finite values; a group without any keeps scale = shift = 0 and codes 0.
  uint32_t lo_key = ordered_bits(INFINITY), hi_key = ordered_bits(-INFINITY);
#pragma unroll
  for (int j = 0; j < VPL; ++j)
    if (isfinite(x[j])) {
      lo_key = min(lo_key, ordered_bits(x[j]));
      hi_key = max(hi_key, ordered_bits(x[j]));
    }
  if (lanes_per_group == 32) {
    lo_key = __reduce_min_sync(0xffffffffu, lo_key);
    hi_key = __reduce_max_sync(0xffffffffu, hi_key);
  } else {
    for (int o = lanes_per_group / 2; o >= 1; o >>= 1) {
      lo_key = min(lo_key, __shfl_xor_sync(0xffffffffu, lo_key, o));
      hi_key = max(hi_key, __shfl_xor_sync(0xffffffffu, hi_key, o));
    }
  }
  const float lo = from_ordered_bits(lo_key), hi = from_ordered_bits(hi_key);
  float s = 0.f, z = 0.f;
  if (lo != INFINITY) {
    s = fp16_satfinite((hi - lo) / 15.f);
    z = fp16_satfinite(lo);
  }
#pragma unroll
  for (int j = 0; j < VPL; ++j) {  // no branch on s, as for int8
    const float q = rintf((x[j] - z) / s);
    const int c = s == 0.f || isnan(q) ? 0 : static_cast<int>(fminf(fmaxf(q, 0.f), 15.f));
    out.code[j] = static_cast<uint16_t>(c);
  }
  out.scale = s;
  out.shift = z;
}

// The lane's VPL raw 16-bit values of row `row` (one vector load).
template <int VPL>
struct RawRow {
  uint16_t bits[VPL];
};
template <int VPL>
__device__ __forceinline__ RawRow<VPL> load_raw(const uint16_t* src, long long row, int lane) {
  RawRow<VPL> r;
  const uint16_t* at = src + row * (32 * VPL) + lane * VPL;
  if constexpr (VPL == 8) {
    *reinterpret_cast<uint4*>(r.bits) = __ldg(reinterpret_cast<const uint4*>(at));
  } else if constexpr (VPL == 4) {
    *reinterpret_cast<uint2*>(r.bits) = __ldg(reinterpret_cast<const uint2*>(at));
  } else {
    *reinterpret_cast<uint32_t*>(r.bits) = __ldg(reinterpret_cast<const uint32_t*>(at));
  }
  return r;
}

// Rotary pairs whose sin and cos a lane computes: lane * kPairsPerLane + j (VPL / 2 consecutive pairs).
template <int VPL>
constexpr int kPairsPerLane = VPL / 2 > 0 ? VPL / 2 : 1;

// To float, with RoPE (K) through the warp's staging buffers (a dim's partner may sit in another lane).
// Each pair's sin and cos are computed once, by the lane that owns the pair, and shared through `sc`;
// `freq` holds the lane's pairs' frequencies (0 past rotary_dim / 2), loaded at the kernel's start. No
// branch on rotary_dim: a lane's pairs are computed side by side, and dims past rotary_dim keep x.
template <int VPL>
__device__ __forceinline__ void to_floats(const AppendKernelParams& p, const RawRow<VPL>& raw, bool rope, int position,
                                          const double (&freq)[kPairsPerLane<VPL>], float* stage, float2* sc, int lane,
                                          float (&x)[VPL]) {
  constexpr int D = 32 * VPL;
#pragma unroll
  for (int j = 0; j < VPL; ++j) x[j] = to_float(raw.bits[j], p.is_fp16 != 0);
  if (!rope || p.rope_style == 0) return;
#pragma unroll
  for (int j = 0; j < VPL; ++j) stage[lane * VPL + j] = x[j];
#pragma unroll
  for (int j = 0; j < kPairsPerLane<VPL>; ++j) {
    float s, c;
    rope::pair_sincos(freq[j], position, &s, &c);
    sc[lane * kPairsPerLane<VPL> + j] = make_float2(s, c);
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < VPL; ++j) {
    const int d = lane * VPL + j;
    int partner, pair;
    bool first;
    rope::pair_of(p.rope_style, p.rotary_dim, d, &partner, &pair, &first);
    // Past rotary_dim the indices are not a pair's: keep them inside the buffers; the result is unused.
    const float2 v = sc[min(pair, D / 2 - 1)];
    const float rotated = rope::rotate_sc(first, x[j], stage[min(partner, D - 1)], v.x, v.y);
    x[j] = d < p.rotary_dim ? rotated : x[j];
  }
}

__device__ __forceinline__ void write_meta(const Side& s, uint8_t* tile, int token, int page_size, int lane,
                                           int lanes_per_group, float scale, float shift) {
  if (s.bits == 16 || lane % lanes_per_group != 0) return;
  const int g = lane / lanes_per_group;
  if (s.kind == static_cast<int>(KvKind::kFP8E4M3) || s.kind == static_cast<int>(KvKind::kFP8E5M2)) {
    if (g == 0) *reinterpret_cast<float*>(tile + s.meta_offset + token * 4) = scale;
  } else if (s.kind == static_cast<int>(KvKind::kINT8)) {
    *reinterpret_cast<uint16_t*>(tile + s.meta_offset + (g * page_size + token) * 2) =
        __half_as_ushort(__float2half_rn(scale));
  } else {
    const uint32_t entry = static_cast<uint32_t>(__half_as_ushort(__float2half_rn(scale))) |
                           (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(shift))) << 16);
    *reinterpret_cast<uint32_t*>(tile + s.meta_offset + (g * page_size + token) * 4) = entry;
  }
}

// Quantize one row (K or V) and write its values and scales into its tile.
template <int VPL>
__device__ __forceinline__ void write_row(const AppendKernelParams& p, const Side& s, bool is_key, uint8_t* tile,
                                          int token, int page_size, int lane, const float (&x)[VPL]) {
  const int lanes_per_group = s.lanes_per_group;
  LaneRow<VPL> q;
  quantize_lanes<VPL>(s.kind, lanes_per_group, p.fp8_static_scale, x, q);
  write_meta(s, tile, token, page_size, lane, lanes_per_group, q.scale, q.shift);
  if (s.bits == 16 || s.bits == 8) {
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      int nib;
      const uint32_t off = layout::data_offset(s.bits, is_key, s.data_bytes_row, token, lane * VPL + j, &nib);
      if (s.bits == 16)
        *reinterpret_cast<uint16_t*>(tile + off) = q.code[j];
      else
        tile[off] = static_cast<uint8_t>(q.code[j]);
    }
    return;
  }
  // int4: dims d and d + 8 (d % 16 < 8) of this token share a V byte and a K word; they sit 8 / VPL lanes
  // apart, so the lanes swap their codes first.
  constexpr int kPartner = 8 / VPL;
  uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < VPL; ++j) packed |= static_cast<uint32_t>(q.code[j]) << (4 * j);
  const bool low = ((lane * VPL) & 8) == 0;  // the lane of dim d, not d + 8
  if (!is_key) {
    const uint32_t upper = __shfl_down_sync(0xffffffffu, packed, kPartner);
    if (low) {
#pragma unroll
      for (int j = 0; j < VPL; ++j) {
        int nib;
        const uint32_t off = layout::data_offset(4, false, s.data_bytes_row, token, lane * VPL + j, &nib);
        tile[off] = static_cast<uint8_t>(q.code[j] | (((upper >> (4 * j)) & 0xF) << 4));
      }
    }
    return;
  }
  // int4 K: a byte holds tokens t and t ^ 8 of one dim, which may be written by another warp of this launch
  // (prefill) or be an earlier token's. This token's nibbles of dims k, k + 1, k + 8, k + 9 of a fragment
  // (k = dim % 16 even, < 8) sit in one 32-bit word, in bytes 0, 2, 1, 3, all in nibble (t % 16) / 8
  // (formats/tile_position.h: nibble slot i = (t % 16) / 8 + 2 (k / 8) + 4 (k % 2) is byte i / 2, nibble i % 2).
  // Clear and set them with two atomics (fire-and-forget, ordered for one address and thread), which leaves
  // every other nibble as it was without a read. A lane holds VPL / 2 such words' dims, as does its partner:
  // the low lane writes the first half of them, the high lane the rest (VPL = 2: the low lane the one).
  const uint32_t other = __shfl_xor_sync(0xffffffffu, packed, kPartner);
  const uint32_t codes_lo = low ? packed : other;  // dims d0 .. d0 + VPL - 1
  const uint32_t codes_hi = low ? other : packed;  // dims d0 + 8 .. d0 + 8 + VPL - 1
  const int d0 = (low ? lane : lane ^ kPartner) * VPL;
  constexpr int kWords = VPL / 2;
  constexpr int kMine = kWords > 1 ? kWords / 2 : 1;
  if (kWords == 1 && !low) return;
#pragma unroll
  for (int m = 0; m < kMine; ++m) {
    const int w = (low ? 0 : kWords / 2) + m;
    int nib;
    const uint32_t off = layout::data_offset(4, true, s.data_bytes_row, token, d0 + 2 * w, &nib);
    const uint32_t lo2 = (codes_lo >> (8 * w)) & 0xFFu, hi2 = (codes_hi >> (8 * w)) & 0xFFu;  // dims +0 +1, +8 +9
    const uint32_t set = ((lo2 & 0xFu) | ((hi2 & 0xFu) << 8) | ((lo2 >> 4) << 16) | ((hi2 >> 4) << 24)) << (4 * nib);
    unsigned int* word = reinterpret_cast<unsigned int*>(tile + (off & ~3u));
    atomicAnd(word, ~(0x0F0F0F0Fu << (4 * nib)));
    atomicOr(word, set);
  }
}

template <int D>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) kv_append_kernel(const __grid_constant__ AppendKernelParams p) {
  constexpr int VPL = D / 32;
  constexpr int kPairs = kPairsPerLane<VPL>;
  __shared__ float stage_all[kWarpsPerBlock][D];
  __shared__ float2 sincos_all[kWarpsPerBlock][D / 2];
  // A decode-attention grid launched as our programmatic dependent may be scheduled now; it waits for this
  // grid's completion before it reads the cache.
  ptx::griddep_launch_dependents();
  const int lane = threadIdx.x % 32;
  // Warp (token i, head h, role): K and V of a row are independent, so they get a warp each; a block holds
  // two tokens of one head.
  const int warp_in_block = static_cast<int>(threadIdx.x / 32);
  const int role = warp_in_block & 1;  // 0 K, 1 V
  const int i = static_cast<int>(blockIdx.x) * (kWarpsPerBlock / 2) + warp_in_block / 2;
  const int h = static_cast<int>(blockIdx.y);
  if (i >= p.num_tokens) return;

  // Every load that does not depend on the position first: the row, start_pos (decode) and the frequencies
  // of the lane's rotary pairs (K); the parameter bank serializes lanes that read different entries, which
  // this overlaps with the global loads.
  const RawRow<VPL> raw = load_raw<VPL>(role == 0 ? p.k : p.v, static_cast<long long>(i) * p.num_kv_heads + h, lane);
  const bool decode = p.cu_seqlens == nullptr;  // token i is sequence i's only new token
  int start = decode ? __ldg(p.start_pos + i) : 0;
  double freq[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int pair = lane * kPairs + j;
    freq[j] = role == 0 && p.rope_style != 0 && pair < p.rotary_dim / 2 ? p.inv_freq[pair] : 0.0;
  }

  // Which sequence, and where in it.
  int b = i, run_start = i;
  if (!decode) {
    int lo = 0, hi = p.batch;  // largest b with cu_seqlens[b] <= i (runs may be empty)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (__ldg(p.cu_seqlens + mid) <= i)
        lo = mid;
      else
        hi = mid;
    }
    b = lo;
    run_start = __ldg(p.cu_seqlens + b);
    start = __ldg(p.start_pos + b);
  }
  const int pos = start + (i - run_start);
  const int page_size = 1 << p.page_size_log2;
  const int page_index = pos >> p.page_size_log2;
  const long long page = p.block_table
                             ? __ldg(p.block_table + static_cast<long long>(b) * p.max_pages_per_seq + page_index)
                             : static_cast<long long>(b) * p.max_pages_per_seq + page_index;
  const int token = pos & (page_size - 1);
  const Side& side = p.side[role];
  uint8_t* tile = p.pool + page * p.page_bytes + side.base + static_cast<long long>(h) * side.tile_bytes;

  float x[VPL];
  to_floats<VPL>(p, raw, role == 0, pos, freq, stage_all[warp_in_block], sincos_all[warp_in_block], lane, x);
  write_row<VPL>(p, side, role == 0, tile, token, page_size, lane, x);
}

Side make_side(const KvTileLayout& t, long long base) {
  Side s{};
  s.kind = static_cast<int>(t.format.kind);
  s.lanes_per_group = 32 / kv_groups(t.format, t.head_dim);
  s.bits = kv_bits(t.format.kind);
  s.tile_bytes = static_cast<int>(t.tile_bytes());
  s.meta_offset = static_cast<int>(t.meta_offset());
  s.data_bytes_row = t.data_bytes_per_token();
  s.base = base;
  return s;
}

template <int D>
Status launch(const KvAppendParams& p, int num_tokens, cudaStream_t stream) {
  const KvPageLayout& l = p.layout;
  if (l.num_kv_heads > 65535)  // the grid's y extent
    return Status(StatusCode::kUnsupported, "num_kv_heads " + std::to_string(l.num_kv_heads) + " is over 65535");
  const int rot = rotary_dim_of(p);
  AppendKernelParams kp{};
  kp.k = static_cast<const uint16_t*>(p.k);
  kp.v = static_cast<const uint16_t*>(p.v);
  kp.pool = static_cast<uint8_t*>(p.pool);
  kp.cu_seqlens = p.cu_seqlens;
  kp.start_pos = p.start_pos;
  kp.block_table = p.block_table;
  kp.page_bytes = static_cast<long long>(l.page_bytes());
  kp.side[0] = make_side(l.k_tile(), 0);
  kp.side[1] = make_side(l.v_tile(), static_cast<long long>(l.k_bytes_per_page()));
  while ((1 << kp.page_size_log2) < l.page_size) ++kp.page_size_log2;
  kp.max_pages_per_seq = p.max_pages_per_seq;
  kp.num_kv_heads = l.num_kv_heads;
  kp.num_tokens = num_tokens;
  kp.batch = p.batch;
  kp.is_fp16 = p.dtype == DType::kFP16 ? 1 : 0;
  kp.rope_style = static_cast<int>(p.rope);
  kp.rotary_dim = rot;
  kp.fp8_static_scale = p.quant.fp8_static_scale;
  if (p.rope != RopeStyle::kNone)
    for (int i = 0; i < rot / 2; ++i) kp.inv_freq[i] = rope::inv_freq(p.rope_theta, i, rot);
  const dim3 grid(static_cast<unsigned>((num_tokens + kWarpsPerBlock / 2 - 1) / (kWarpsPerBlock / 2)),
                  static_cast<unsigned>(l.num_kv_heads));
  kv_append_kernel<D><<<grid, kWarpsPerBlock * 32, 0, stream>>>(kp);
  QDEC_CUDA_RETURN(cudaGetLastError());
  return Status::Ok();
}

}  // namespace
}  // namespace qdec::kvcache

namespace qdec {

Status kv_append(const KvAppendParams& p, cudaStream_t stream) {
  using namespace kvcache;
  int num_tokens = 0;
  QDEC_RETURN_IF_ERROR(validate_append(p, &num_tokens));
  if (num_tokens == 0) return Status::Ok();
  switch (p.layout.head_dim) {
    case 64:
      return launch<64>(p, num_tokens, stream);
    case 128:
      return launch<128>(p, num_tokens, stream);
    case 256:
      return launch<256>(p, num_tokens, stream);
    default:
      return Status(StatusCode::kUnsupported, "head_dim " + std::to_string(p.layout.head_dim) + " is not supported");
  }
}

}  // namespace qdec
