// Fused append: RoPE on new K rows, dynamic per-(token, head) quantization of K and V, and the scattered
// writes into pages of the pool (layout in include/qdec/kv_cache.h, byte order in docs/formats.md).
//
//   k, v   [num_tokens, num_kv_heads, head_dim] bf16/fp16     pool [num_pages][K tiles][V tiles]
//
// One warp per (new token, KV head, K or V); lane l holds dims [l * VPL, (l + 1) * VPL), VPL = head_dim / 32,
// so a scale group is a run of whole lanes and its reductions are xor shuffles inside the run. The rounding
// follows the CPU quantizer step by step (same IEEE division, same fp16/fp8 conversions), so the bytes are
// identical; RoPE comes from kvcache/rope.h, shared with the CPU. Values land in tensor-core fragment order
// (formats/tile_position.h): 16- and 8-bit values are plain stores; an int4 V byte holds dims d and d + 8 of
// one token (combined through a shuffle); an int4 K byte holds tokens t and t + 8 of one dim, so K nibbles
// are cleared and set with word atomics (no read, no race with the warp of t ^ 8 in a prefill).
// An append is well under 1 MB: the kernel is latency-bound, so every load that does not depend on the
// block table is issued before the start_pos -> block table chain, and K and V rows get a warp each.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "formats/tile_position.h"
#include "kvcache/append_internal.h"
#include "kvcache/rope.h"
#include "runtime/cuda_check.h"

namespace qdec::kvcache {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxRotaryPairs = 128;

struct Side {          // K or V of the pool
  int kind;            // KvKind
  int groups;          // scale groups per row
  int bits;            // 16, 8, 4
  int tile_bytes;      // one head's tile
  int meta_offset;     // start of the scales inside a tile
  int data_bytes_row;  // head_dim * bits / 8
  long long base;      // offset of head 0's tile inside a page (0 for K, k_bytes_per_page for V)
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

// Min / max in the order where -0 < +0 (as the CPU quantizer), so any reduction order gives the same bits.
__device__ __forceinline__ float min_signed(float a, float b) {
  return (b < a || (b == a && signbit(b))) ? b : a;
}
__device__ __forceinline__ float max_signed(float a, float b) {
  return (b > a || (b == a && !signbit(b))) ? b : a;
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
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      scale = amax / (e4m3 ? 448.f : 57344.f);
      if (scale == 0.f) scale = 1.f;
    }
#pragma unroll
    for (int j = 0; j < VPL; ++j)
      out.code[j] = __nv_cvt_float_to_fp8(x[j] / scale, __NV_SATFINITE, e4m3 ? __NV_E4M3 : __NV_E5M2);
    out.scale = scale;
    return;
  }
  if (kind == static_cast<int>(KvKind::kINT8)) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < VPL; ++j)
      if (isfinite(x[j])) amax = fmaxf(amax, fabsf(x[j]));
    for (int o = lanes_per_group / 2; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = fp16_satfinite(amax / 127.f);
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      int c = 0;
      if (s != 0.f) {
        const float q = rintf(x[j] / s);
        c = isnan(q) ? 0 : static_cast<int>(fminf(fmaxf(q, -127.f), 127.f));
      }
      out.code[j] = static_cast<uint8_t>(static_cast<int8_t>(c));
    }
    out.scale = s;
    return;
  }
  // int4: asymmetric over the finite values; a group without any keeps scale = shift = 0 and codes 0.
  float lo = INFINITY, hi = -INFINITY;
#pragma unroll
  for (int j = 0; j < VPL; ++j)
    if (isfinite(x[j])) {
      lo = min_signed(lo, x[j]);
      hi = max_signed(hi, x[j]);
    }
  for (int o = lanes_per_group / 2; o >= 1; o >>= 1) {
    lo = min_signed(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max_signed(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  float s = 0.f, z = 0.f;
  if (lo != INFINITY) {
    s = fp16_satfinite((hi - lo) / 15.f);
    z = fp16_satfinite(lo);
  }
#pragma unroll
  for (int j = 0; j < VPL; ++j) {
    int c = 0;
    if (s != 0.f) {
      const float q = rintf((x[j] - z) / s);
      c = isnan(q) ? 0 : static_cast<int>(fminf(fmaxf(q, 0.f), 15.f));
    }
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

// To float, with RoPE (K) through the warp's staging buffers (a dim's partner may sit in another lane).
// Each pair's sin and cos are computed once, by the lane that owns the pair (VPL / 2 consecutive pairs per
// lane), and shared through `sc`; the frequencies come from the block's shared copy.
template <int VPL>
__device__ __forceinline__ void to_floats(const AppendKernelParams& p, const RawRow<VPL>& raw, bool rope, int position,
                                          const double* inv_freq, float* stage, float2* sc, int lane, float (&x)[VPL]) {
#pragma unroll
  for (int j = 0; j < VPL; ++j) x[j] = to_float(raw.bits[j], p.is_fp16 != 0);
  if (!rope || p.rope_style == 0) return;
#pragma unroll
  for (int j = 0; j < VPL; ++j) stage[lane * VPL + j] = x[j];
  constexpr int kPairsPerLane = VPL / 2 > 0 ? VPL / 2 : 1;
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j) {
    const int pair = lane * kPairsPerLane + j;
    if (pair < p.rotary_dim / 2) {
      float s, c;
      rope::pair_sincos(inv_freq[pair], position, &s, &c);
      sc[pair] = make_float2(s, c);
    }
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < VPL; ++j) {
    const int d = lane * VPL + j;
    if (d < p.rotary_dim) {
      int partner, pair;
      bool first;
      rope::pair_of(p.rope_style, p.rotary_dim, d, &partner, &pair, &first);
      const float2 v = sc[pair];
      x[j] = rope::rotate_sc(first, x[j], stage[partner], v.x, v.y);
    }
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
  const int lanes_per_group = 32 / s.groups;
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
  if (!is_key) {
    // int4 V: the byte of dim d (d % 16 < 8) also holds dim d + 8 of this token, 8 / VPL lanes up.
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < VPL; ++j) packed |= static_cast<uint32_t>(q.code[j]) << (4 * j);
    const uint32_t upper = __shfl_down_sync(0xffffffffu, packed, 8 / VPL);
    if (((lane * VPL) & 8) == 0) {
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
  // (prefill) or be an earlier token's. Dims d and d + 1 (d even) are the lo and hi of one register, so
  // both nibbles sit in one 32-bit word: clear and set them with two atomics (fire-and-forget, ordered for
  // one address and thread), which leaves every other nibble as it was without a read.
#pragma unroll
  for (int j = 0; j < VPL; j += 2) {
    int n0, n1;
    const uint32_t o0 = layout::data_offset(4, true, s.data_bytes_row, token, lane * VPL + j, &n0);
    const uint32_t o1 = layout::data_offset(4, true, s.data_bytes_row, token, lane * VPL + j + 1, &n1);
    const uint32_t sh0 = 8 * (o0 & 3) + 4 * n0, sh1 = 8 * (o1 & 3) + 4 * n1;
    unsigned int* word = reinterpret_cast<unsigned int*>(tile + (o0 & ~3u));
    atomicAnd(word, ~((0xFu << sh0) | (0xFu << sh1)));
    atomicOr(word, (static_cast<uint32_t>(q.code[j]) << sh0) | (static_cast<uint32_t>(q.code[j + 1]) << sh1));
  }
}

template <int D>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) kv_append_kernel(const __grid_constant__ AppendKernelParams p) {
  constexpr int VPL = D / 32;
  __shared__ float stage_all[kWarpsPerBlock][D];
  __shared__ float2 sincos_all[kWarpsPerBlock][D / 2];
  __shared__ double inv_freq[kMaxRotaryPairs];
  // A decode-attention grid launched as our programmatic dependent may be scheduled now; it waits for this
  // grid's completion before it reads the cache.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  // The frequencies sit in the parameter (constant) bank, where loads by different lanes of different
  // addresses are serialized: copy them once per block, while the row, start_pos and block-table loads below
  // are in flight (the barrier comes after all of them are issued).
  if (p.rope_style != 0)
    for (int k = threadIdx.x; k < p.rotary_dim / 2; k += blockDim.x) inv_freq[k] = p.inv_freq[k];
  const int lane = threadIdx.x % 32;
  // Warp (token i, head h, role): K and V of a row are independent, so they get a warp each (the chain
  // of dependent latencies per warp is what bounds this kernel).
  const long long warp = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int role = static_cast<int>(warp & 1);  // 0 K, 1 V
  const int h = static_cast<int>((warp >> 1) % p.num_kv_heads);
  // New token (input row group). Warps past the last token take part in the barrier below only; their
  // loads use the last token, so every load stays in bounds and unconditional.
  const bool active = (warp >> 1) / p.num_kv_heads < p.num_tokens;
  const long long i = active ? (warp >> 1) / p.num_kv_heads : p.num_tokens - 1;

  // The row does not depend on where it goes: load it first, so its latency overlaps the chain
  // start_pos -> block table below.
  const RawRow<VPL> raw = load_raw<VPL>(role == 0 ? p.k : p.v, i * p.num_kv_heads + h, lane);

  // Which sequence, and where in it.
  int b = static_cast<int>(i), run_start = static_cast<int>(i);
  if (p.cu_seqlens) {
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
  }
  const int pos = __ldg(p.start_pos + b) + static_cast<int>(i - run_start);
  const int page_size = 1 << p.page_size_log2;
  const int page_index = pos >> p.page_size_log2;
  const long long page = p.block_table
                             ? __ldg(p.block_table + static_cast<long long>(b) * p.max_pages_per_seq + page_index)
                             : static_cast<long long>(b) * p.max_pages_per_seq + page_index;
  const int token = pos & (page_size - 1);
  const Side& side = p.side[role];
  uint8_t* tile = p.pool + page * p.page_bytes + side.base + static_cast<long long>(h) * side.tile_bytes;

  __syncthreads();  // inv_freq
  if (!active) return;
  float x[VPL];
  to_floats<VPL>(p, raw, role == 0, pos, inv_freq, stage_all[threadIdx.x / 32], sincos_all[threadIdx.x / 32], lane, x);
  write_row<VPL>(p, side, role == 0, tile, token, page_size, lane, x);
}

Side make_side(const KvTileLayout& t, long long base) {
  Side s{};
  s.kind = static_cast<int>(t.format.kind);
  s.groups = kv_groups(t.format, t.head_dim);
  s.bits = kv_bits(t.format.kind);
  s.tile_bytes = static_cast<int>(t.tile_bytes());
  s.meta_offset = static_cast<int>(t.meta_offset());
  s.data_bytes_row = t.data_bytes_per_token();
  s.base = base;
  return s;
}

}  // namespace
}  // namespace qdec::kvcache

namespace qdec {

Status kv_append(const KvAppendParams& p, cudaStream_t stream) {
  using namespace kvcache;
  int num_tokens = 0;
  QDEC_RETURN_IF_ERROR(validate_append(p, &num_tokens));
  if (num_tokens == 0) return Status::Ok();
  const KvPageLayout& l = p.layout;
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
  const long long warps = 2LL * num_tokens * l.num_kv_heads;
  const dim3 grid(static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock));
  switch (l.head_dim) {
    case 64:
      kv_append_kernel<64><<<grid, kWarpsPerBlock * 32, 0, stream>>>(kp);
      break;
    case 128:
      kv_append_kernel<128><<<grid, kWarpsPerBlock * 32, 0, stream>>>(kp);
      break;
    case 256:
      kv_append_kernel<256><<<grid, kWarpsPerBlock * 32, 0, stream>>>(kp);
      break;
    default:
      return Status(StatusCode::kUnsupported, "head_dim " + std::to_string(l.head_dim) + " is not supported");
  }
  QDEC_CUDA_RETURN(cudaGetLastError());
  return Status::Ok();
}

}  // namespace qdec
