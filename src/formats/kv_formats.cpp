// CPU ground truth of the KV-cache formats (docs/formats.md). Every kernel that reads or writes a cache is
// tested against these functions bit for bit, so they favour plain, auditable code over speed.
//
// Conventions: the library never prints, exits or aborts. Functions that return a Status reject bad input
// with a message naming the value; the void functions, which have no way to report, do nothing (or write
// zeros) on input that the matching validate_* call would reject.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "formats/tile_position.h"
#include "qdec/formats.h"

namespace qdec {
namespace {

constexpr uint32_t kCanonicalNanF32 = 0x7FFFFFFFu;
// CUDA produces one canonical NaN per type with the sign dropped (cuda_fp16.hpp, cuda_bf16.hpp,
// cuda_fp8.hpp host paths, and the cvt instructions on the device); the ground truth must match it.
constexpr uint16_t kCanonicalNanF16 = 0x7FFF;
constexpr uint16_t kCanonicalNanBF16 = 0x7FFF;
constexpr uint8_t kCanonicalNanFP8 = 0x7F;

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// v / 2^s rounded to nearest, ties to even (1 <= s <= 63).
uint64_t rne_shift(uint64_t v, int s) {
  const uint64_t q = v >> s;
  const uint64_t rem = v & ((uint64_t{1} << s) - 1);
  const uint64_t half = uint64_t{1} << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
}

bool kind_valid(KvKind kind) {
  return static_cast<uint8_t>(kind) <= static_cast<uint8_t>(KvKind::kINT4);
}
bool role_valid(KvRole role) {
  return role == KvRole::kKey || role == KvRole::kValue;
}
bool is_fp8(KvKind kind) {
  return kind == KvKind::kFP8E4M3 || kind == KvKind::kFP8E5M2;
}

// The quantizers only need head_dim to be split into at most kMaxGroups equal groups, so rows accept any
// head_dim up to kMaxHeadDim; the tile functions need the full validate_kv_format.
int row_groups(const KvFormat& f, int head_dim) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim) return 0;
  return kv_groups(f, head_dim);
}

float fp16_round_satfinite(float x) {
  return fp16_bits_to_float(float_to_fp16_bits_satfinite(x));
}

// Meta entry size in bytes (docs/formats.md, "Tiles and pages").
int meta_entry_bytes(KvKind kind) {
  switch (kind) {
    case KvKind::kFP8E4M3:
    case KvKind::kFP8E5M2:
      return 4;
    case KvKind::kINT8:
      return 2;
    case KvKind::kINT4:
      return 4;
    default:
      return 0;
  }
}

void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// Explicit little-endian byte order, so the CPU image matches the device's on any host.
void store_f32(uint8_t* p, float x) {
  const uint32_t u = float_bits(x);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}

float load_f32(const uint8_t* p) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= uint32_t{p[i]} << (8 * i);
  return bits_float(u);
}

bool page_size_valid(int page_size) {
  return page_size >= 16 && page_size <= 256 && (page_size & (page_size - 1)) == 0;
}

bool tile_args_valid(const KvTileLayout& layout, KvRole role, int token) {
  return role_valid(role) && token >= 0 && token < layout.page_size && validate_tile_layout(layout).ok();
}

// tile_data_position without argument checks (the order itself is defined once, in tile_position.h).
DataPosition data_position_unchecked(const KvTileLayout& layout, int bits, KvRole role, int token, int dim) {
  int nibble = 0;
  const uint32_t byte = layout::data_offset(bits, role == KvRole::kKey, kv_data_bytes(layout.format, layout.head_dim),
                                            token, dim, &nibble);
  return {size_t(byte), nibble};
}

size_t meta_offset_unchecked(const KvTileLayout& layout, int token, int group) {
  return layout.meta_offset() +
         (size_t(group) * size_t(layout.page_size) + size_t(token)) * size_t(meta_entry_bytes(layout.format.kind));
}

std::string join_names() {
  std::string s;
  for (const KvFormat& f : all_kv_formats()) {
    if (!s.empty()) s += ", ";
    s += f.name();
  }
  return s;
}

}  // namespace

// ---- Names and sizes -------------------------------------------------------------------------------

std::string KvFormat::name() const {
  switch (kind) {
    case KvKind::kBF16:
      return "bf16";
    case KvKind::kFP16:
      return "fp16";
    case KvKind::kFP8E4M3:
      return "fp8e4m3";
    case KvKind::kFP8E5M2:
      return "fp8e5m2";
    case KvKind::kINT8:
      return int8_group_size == 0 ? "int8" : "int8-g" + std::to_string(int8_group_size);
    case KvKind::kINT4:
      return int4_groups == 1 ? "int4" : "int4-g" + std::to_string(int4_groups);
  }
  return "invalid-kind-" + std::to_string(static_cast<int>(kind));
}

std::vector<KvFormat> all_kv_formats() {
  return {KvFormat::bf16(),  KvFormat::fp16(),   KvFormat::fp8_e4m3(), KvFormat::fp8_e5m2(),
          KvFormat::int8(0), KvFormat::int8(64), KvFormat::int8(32),   KvFormat::int4(1),
          KvFormat::int4(2), KvFormat::int4(4),  KvFormat::int4(8)};
}

Status parse_kv_format(std::string_view name, KvFormat* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "parse_kv_format: output pointer is null");
  for (const KvFormat& f : all_kv_formats()) {
    if (f.name() == name) {
      *out = f;
      return Status::Ok();
    }
  }
  return Status(StatusCode::kInvalidArgument,
                "unknown KV format '" + std::string(name) + "' (accepted: " + join_names() + ")");
}

int kv_bits(KvKind kind) {
  switch (kind) {
    case KvKind::kBF16:
    case KvKind::kFP16:
      return 16;
    case KvKind::kFP8E4M3:
    case KvKind::kFP8E5M2:
    case KvKind::kINT8:
      return 8;
    case KvKind::kINT4:
      return 4;
  }
  return 0;
}

int kv_groups(const KvFormat& f, int head_dim) {
  if (head_dim <= 0 || !kind_valid(f.kind)) return 0;
  if (f.kind == KvKind::kINT8) {
    if (f.int8_group_size == 0) return 1;
    if (f.int8_group_size < 0 || head_dim % f.int8_group_size != 0) return 0;
    const int groups = head_dim / f.int8_group_size;
    return groups <= kMaxGroups ? groups : 0;
  }
  if (f.kind == KvKind::kINT4) {
    if (f.int4_groups <= 0 || f.int4_groups > kMaxGroups || head_dim % f.int4_groups != 0) return 0;
    return f.int4_groups;
  }
  return 1;
}

int kv_data_bytes(const KvFormat& f, int head_dim) {
  if (head_dim <= 0) return 0;
  return head_dim * kv_bits(f.kind) / 8;
}

int kv_meta_bytes(const KvFormat& f, int head_dim) {
  if (f.kind == KvKind::kBF16 || f.kind == KvKind::kFP16) return 0;
  return meta_entry_bytes(f.kind) * kv_groups(f, head_dim);
}

Status validate_kv_format(const KvFormat& f, int head_dim) {
  if (!kind_valid(f.kind)) {
    return Status(StatusCode::kInvalidArgument,
                  "KV format kind " + std::to_string(static_cast<int>(f.kind)) + " is not a known kind");
  }
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    return Status(StatusCode::kInvalidArgument, "head_dim " + std::to_string(head_dim) +
                                                    " is not supported for KV format " + f.name() +
                                                    " (supported: 64, 128, 256)");
  }
  // Fields of other kinds must hold their defaults, so that equal formats compare equal.
  if (f.kind != KvKind::kINT8 && f.int8_group_size != 0) {
    return Status(StatusCode::kInvalidArgument, "int8_group_size " + std::to_string(f.int8_group_size) +
                                                    " is set on KV format " + f.name() +
                                                    " (only int8 has group sizes)");
  }
  if (f.kind != KvKind::kINT4 && f.int4_groups != 1) {
    return Status(StatusCode::kInvalidArgument, "int4_groups " + std::to_string(f.int4_groups) +
                                                    " is set on KV format " + f.name() +
                                                    " (only int4 has group counts; others use 1)");
  }
  if (f.kind == KvKind::kINT8) {
    const int g = f.int8_group_size;
    if (g != 0 && g != 32 && g != 64) {
      return Status(StatusCode::kInvalidArgument,
                    "int8 group size " + std::to_string(g) + " is not supported (supported: 0 = row-wise, 32, 64)");
    }
    if (g != 0 && head_dim % g != 0) {
      return Status(StatusCode::kInvalidArgument,
                    "int8 group size " + std::to_string(g) + " does not divide head_dim " + std::to_string(head_dim));
    }
  }
  if (f.kind == KvKind::kINT4) {
    const int g = f.int4_groups;
    if (g != 1 && g != 2 && g != 4 && g != 8) {
      return Status(StatusCode::kInvalidArgument,
                    "int4 group count " + std::to_string(g) + " is not supported (supported: 1, 2, 4, 8)");
    }
    if (head_dim % g != 0) {
      return Status(StatusCode::kInvalidArgument,
                    "int4 group count " + std::to_string(g) + " does not divide head_dim " + std::to_string(head_dim));
    }
  }
  return Status::Ok();
}

// ---- Rounding ground truth -------------------------------------------------------------------------

uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kCanonicalNanBF16;
  // Adding 0x7FFF plus the kept lsb rounds half to even; a carry into the exponent yields Inf correctly.
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float bf16_bits_to_float(uint16_t b) {
  return bits_float(uint32_t{b} << 16);
}

uint16_t float_to_fp16_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kCanonicalNanF16;
  // 65520 is the midpoint between 65504 and 2^16; ties go to the even neighbour, which is Inf.
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {
    // Normal half: rebias the exponent (127 -> 15) and round off 13 mantissa bits; a mantissa carry
    // moves into the exponent, which is the correct result.
    return static_cast<uint16_t>(sign | rne_shift(a - 0x38000000u, 13));
  }
  const int e = static_cast<int>(a >> 23);
  // Below 2^-25 (half the smallest subnormal) everything rounds to zero; 2^-25 itself ties to even (0).
  if (e < 102) return static_cast<uint16_t>(sign);
  // Subnormal half: the result counts units of 2^-24, i.e. (1.m * 2^(e-127)) / 2^-24.
  const uint64_t m = (a & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | rne_shift(m, 126 - e));
}

float fp16_bits_to_float(uint16_t b) {
  const uint32_t sign = uint32_t{b & 0x8000u} << 16;
  const uint32_t e = (b >> 10) & 0x1Fu;
  const uint32_t m = b & 0x3FFu;
  if (e == 0x1F) return m != 0 ? bits_float(kCanonicalNanF32) : bits_float(sign | 0x7F800000u);
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1p-24f;  // exact: m < 2^10
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t float_to_fp16_bits_satfinite(float x) {
  const uint16_t h = float_to_fp16_bits(x);
  if ((h & 0x7FFFu) == 0x7C00u) return static_cast<uint16_t>((h & 0x8000u) | 0x7BFFu);
  return h;
}

uint8_t float_to_fp8_bits(float x, KvKind kind) {
  if (!is_fp8(kind)) return 0;
  const bool e4m3 = kind == KvKind::kFP8E4M3;
  const int mbits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint64_t max_code = e4m3 ? 0x7E : 0x7B;

  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kCanonicalNanFP8;
  if (a == 0x7F800000u) return static_cast<uint8_t>(sign | max_code);
  const int e = static_cast<int>(a >> 23);
  // Float subnormals are far below half the smallest fp8 subnormal (2^-10 / 2^-17).
  if (e == 0) return static_cast<uint8_t>(sign);
  const int target_e = e - 127 + bias;
  uint64_t code;
  if (target_e >= 1) {
    // Rebias and round off the low mantissa bits. Codes are monotonic in |x|, so anything that rounds past
    // the largest finite code (including the e4m3 NaN slot 0x7F) saturates by a plain clamp below.
    code = rne_shift((uint64_t(target_e) << 23) | (a & 0x7FFFFFu), 23 - mbits);
  } else {
    // Subnormal fp8: count units of 2^(1 - bias - mbits); rounding up to 2^mbits gives the smallest normal.
    const int s = 23 - mbits + 1 - target_e;
    const uint64_t m = (a & 0x7FFFFFu) | 0x800000u;
    code = s > 60 ? 0 : rne_shift(m, s);
  }
  return static_cast<uint8_t>(sign | std::min(code, max_code));
}

float fp8_bits_to_float(uint8_t b, KvKind kind) {
  // e5m2 is the upper byte of an fp16 value.
  if (kind == KvKind::kFP8E5M2) return fp16_bits_to_float(static_cast<uint16_t>(b << 8));
  if (kind != KvKind::kFP8E4M3) return 0.0f;
  if ((b & 0x7F) == 0x7F) return bits_float(kCanonicalNanF32);
  const uint32_t sign = uint32_t{b & 0x80u} << 24;
  const uint32_t e = (b >> 3) & 0xFu;
  const uint32_t m = b & 0x7u;
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1p-9f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

// ---- One row -------------------------------------------------------------------------------------

void quantize_row(const KvFormat& f, int head_dim, const float* x, QuantizedRow* out, const QuantizeOptions& opts) {
  if (out == nullptr) return;
  *out = QuantizedRow{};
  const int groups = row_groups(f, head_dim);
  if (groups == 0 || x == nullptr) return;
  const int gsize = head_dim / groups;

  switch (f.kind) {
    case KvKind::kBF16:
    case KvKind::kFP16: {
      const bool bf16 = f.kind == KvKind::kBF16;
      for (int i = 0; i < head_dim; ++i) {
        out->code[i] = bf16 ? float_to_bf16_bits(x[i]) : float_to_fp16_bits(x[i]);
      }
      out->scale[0] = 1.0f;
      return;
    }
    case KvKind::kFP8E4M3:
    case KvKind::kFP8E5M2: {
      float scale;
      if (opts.fp8_static_scale > 0.0f) {
        scale = opts.fp8_static_scale;
      } else {
        float amax = 0.0f;
        for (int i = 0; i < head_dim; ++i) {
          if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
        }
        scale = amax / (f.kind == KvKind::kFP8E4M3 ? kFp8E4M3Max : kFp8E5M2Max);
        if (scale == 0.0f) scale = 1.0f;
      }
      for (int i = 0; i < head_dim; ++i) out->code[i] = float_to_fp8_bits(x[i] / scale, f.kind);
      out->scale[0] = scale;
      return;
    }
    case KvKind::kINT8: {
      for (int g = 0; g < groups; ++g) {
        const float* xg = x + g * gsize;
        float amax = 0.0f;
        for (int i = 0; i < gsize; ++i) {
          if (std::isfinite(xg[i])) amax = std::max(amax, std::fabs(xg[i]));
        }
        const float s = fp16_round_satfinite(amax / 127.0f);
        out->scale[g] = s;
        if (s == 0.0f) continue;  // codes stay 0
        for (int i = 0; i < gsize; ++i) {
          const float q = std::rint(xg[i] / s);
          const int c = std::isnan(q) ? 0 : static_cast<int>(std::clamp(q, -127.0f, 127.0f));
          out->code[g * gsize + i] = static_cast<uint8_t>(static_cast<int8_t>(c));
        }
      }
      return;
    }
    case KvKind::kINT4: {
      for (int g = 0; g < groups; ++g) {
        const float* xg = x + g * gsize;
        float lo = 0.0f, hi = 0.0f;
        bool any_finite = false;
        // -0 counts as below +0, so that the stored zero signs of z and s do not depend on the order in
        // which a kernel reduces the group (IEEE 754-2019 minimum / maximum).
        for (int i = 0; i < gsize; ++i) {
          const float v = xg[i];
          if (!std::isfinite(v)) continue;
          if (!any_finite || v < lo || (v == lo && std::signbit(v))) lo = v;
          if (!any_finite || v > hi || (v == hi && !std::signbit(v))) hi = v;
          any_finite = true;
        }
        if (!any_finite) continue;  // the all-zero row's scale and shift (0, 0), codes 0
        // hi - lo may overflow to +Inf; Inf / 15 saturates to 65504, as the spec requires.
        const float s = fp16_round_satfinite((hi - lo) / 15.0f);
        const float z = fp16_round_satfinite(lo);
        out->scale[g] = s;
        out->shift[g] = z;
        if (s == 0.0f) continue;
        for (int i = 0; i < gsize; ++i) {
          const float q = std::rint((xg[i] - z) / s);
          const int c = std::isnan(q) ? 0 : static_cast<int>(std::clamp(q, 0.0f, 15.0f));
          out->code[g * gsize + i] = static_cast<uint16_t>(c);
        }
      }
      return;
    }
  }
}

namespace {

// Shared by the float and double dequantizers. In double every product and sum is exact: codes have at
// most 11 significant bits, scales 24, and an int4 q * s + z spans at most 2^-24 .. 2^20 when s and z are
// fp16 values. In float, int4 is one fused multiply-add (a single rounding).
template <class T>
void dequantize_row_as(const KvFormat& f, int head_dim, const QuantizedRow& q, T* x) {
  if (x == nullptr || head_dim <= 0 || head_dim > kMaxHeadDim) return;
  const int groups = row_groups(f, head_dim);
  if (groups == 0) {
    std::fill(x, x + head_dim, T(0));
    return;
  }
  const int gsize = head_dim / groups;
  for (int i = 0; i < head_dim; ++i) {
    const int g = i / gsize;
    const uint16_t c = q.code[i];
    switch (f.kind) {
      case KvKind::kBF16:
        x[i] = bf16_bits_to_float(c);
        break;
      case KvKind::kFP16:
        x[i] = fp16_bits_to_float(c);
        break;
      case KvKind::kFP8E4M3:
      case KvKind::kFP8E5M2:
        x[i] = T(fp8_bits_to_float(static_cast<uint8_t>(c), f.kind)) * T(q.scale[0]);
        break;
      case KvKind::kINT8:
        x[i] = T(static_cast<int8_t>(static_cast<uint8_t>(c))) * T(q.scale[g]);
        break;
      case KvKind::kINT4:
        if constexpr (std::is_same_v<T, float>) {
          x[i] = std::fmaf(static_cast<float>(c & 0xF), q.scale[g], q.shift[g]);
        } else {
          x[i] = T(c & 0xF) * T(q.scale[g]) + T(q.shift[g]);
        }
        break;
    }
  }
}

}  // namespace

void dequantize_row(const KvFormat& f, int head_dim, const QuantizedRow& q, float* x) {
  dequantize_row_as(f, head_dim, q, x);
}

void dequantize_row_f64(const KvFormat& f, int head_dim, const QuantizedRow& q, double* x) {
  dequantize_row_as(f, head_dim, q, x);
}

// ---- Tiles -----------------------------------------------------------------------------------------

Status validate_tile_layout(const KvTileLayout& layout) {
  if (!page_size_valid(layout.page_size)) {
    return Status(StatusCode::kInvalidArgument,
                  "page_size " + std::to_string(layout.page_size) + " is not supported (a power of two, 16..256)");
  }
  return validate_kv_format(layout.format, layout.head_dim);
}

DataPosition tile_data_position(const KvTileLayout& layout, KvRole role, int token, int dim) {
  // No error channel: an invalid argument yields the (meaningless) position {0, 0}.
  if (!tile_args_valid(layout, role, token) || dim < 0 || dim >= layout.head_dim) return {0, 0};
  return data_position_unchecked(layout, kv_bits(layout.format.kind), role, token, dim);
}

size_t tile_meta_offset(const KvTileLayout& layout, int token, int group) {
  if (!validate_tile_layout(layout).ok() || token < 0 || token >= layout.page_size || group < 0 ||
      group >= kv_groups(layout.format, layout.head_dim)) {
    return 0;
  }
  return meta_offset_unchecked(layout, token, group);
}

void tile_write_row(const KvTileLayout& layout, KvRole role, uint8_t* tile, int token, const QuantizedRow& q) {
  if (tile == nullptr || !tile_args_valid(layout, role, token)) return;
  const KvKind kind = layout.format.kind;
  const int bits = kv_bits(kind);
  for (int d = 0; d < layout.head_dim; ++d) {
    const DataPosition p = data_position_unchecked(layout, bits, role, token, d);
    const uint16_t c = q.code[d];
    uint8_t* b = tile + p.byte;
    if (bits == 16) {
      store_u16(b, c);
    } else if (bits == 8) {
      *b = static_cast<uint8_t>(c);
    } else {
      // The other nibble holds the same half of register r ^ 1 (for K another token, t +- 8; for V this
      // token's dim +- 8): keep it.
      const uint8_t nib = c & 0xF;
      *b = p.nibble ? static_cast<uint8_t>((*b & 0x0F) | (nib << 4)) : static_cast<uint8_t>((*b & 0xF0) | nib);
    }
  }
  if (bits == 16) return;
  const int groups = kv_groups(layout.format, layout.head_dim);
  for (int g = 0; g < groups; ++g) {
    uint8_t* m = tile + meta_offset_unchecked(layout, token, g);
    if (is_fp8(kind)) {
      store_f32(m, q.scale[g]);
    } else {
      store_u16(m, float_to_fp16_bits(q.scale[g]));
      if (kind == KvKind::kINT4) store_u16(m + 2, float_to_fp16_bits(q.shift[g]));
    }
  }
}

void tile_read_row(const KvTileLayout& layout, KvRole role, const uint8_t* tile, int token, QuantizedRow* q) {
  if (q == nullptr) return;
  *q = QuantizedRow{};
  if (tile == nullptr || !tile_args_valid(layout, role, token)) return;
  const KvKind kind = layout.format.kind;
  const int bits = kv_bits(kind);
  for (int d = 0; d < layout.head_dim; ++d) {
    const DataPosition p = data_position_unchecked(layout, bits, role, token, d);
    const uint8_t* b = tile + p.byte;
    if (bits == 16) {
      q->code[d] = load_u16(b);
    } else if (bits == 8) {
      q->code[d] = *b;
    } else {
      q->code[d] = p.nibble ? (*b >> 4) : (*b & 0xF);
    }
  }
  if (bits == 16) {
    q->scale[0] = 1.0f;
    return;
  }
  const int groups = kv_groups(layout.format, layout.head_dim);
  for (int g = 0; g < groups; ++g) {
    const uint8_t* m = tile + meta_offset_unchecked(layout, token, g);
    if (is_fp8(kind)) {
      q->scale[g] = load_f32(m);
    } else {
      q->scale[g] = fp16_bits_to_float(load_u16(m));
      if (kind == KvKind::kINT4) q->shift[g] = fp16_bits_to_float(load_u16(m + 2));
    }
  }
}

// ---- Contiguous cache ----------------------------------------------------------------------------

namespace {

bool cache_layout_valid(const ContiguousKvLayout& layout, KvRole role) {
  return role_valid(role) && layout.batch >= 0 && layout.t_max >= 0 && layout.num_kv_heads >= 0 &&
         validate_tile_layout(layout.tile).ok();
}

}  // namespace

void quantize_into_cache(const ContiguousKvLayout& layout, KvRole role, const float* x, const int32_t* seq_lens,
                         uint8_t* cache, const QuantizeOptions& opts) {
  if (x == nullptr || seq_lens == nullptr || cache == nullptr || !cache_layout_valid(layout, role)) return;
  const KvTileLayout& tile = layout.tile;
  const size_t d = size_t(tile.head_dim);
  const size_t heads = size_t(layout.num_kv_heads);
  QuantizedRow row;
  for (int b = 0; b < layout.batch; ++b) {
    const int len = std::clamp(seq_lens[b], 0, layout.t_max);
    for (int t = 0; t < len; ++t) {
      for (int h = 0; h < layout.num_kv_heads; ++h) {
        const float* xr = x + ((size_t(b) * size_t(layout.t_max) + size_t(t)) * heads + size_t(h)) * d;
        quantize_row(tile.format, tile.head_dim, xr, &row, opts);
        tile_write_row(tile, role, cache + layout.tile_offset(b, t, h), t % tile.page_size, row);
      }
    }
  }
}

void dequantize_cache_f64(const ContiguousKvLayout& layout, KvRole role, const uint8_t* cache, const int32_t* seq_lens,
                          double* x) {
  if (x == nullptr || !cache_layout_valid(layout, role)) return;
  const KvTileLayout& tile = layout.tile;
  const size_t d = size_t(tile.head_dim);
  const size_t heads = size_t(layout.num_kv_heads);
  std::fill(x, x + size_t(layout.batch) * size_t(layout.t_max) * heads * d, 0.0);
  if (cache == nullptr || seq_lens == nullptr) return;
  QuantizedRow row;
  for (int b = 0; b < layout.batch; ++b) {
    const int len = std::clamp(seq_lens[b], 0, layout.t_max);
    for (int t = 0; t < len; ++t) {
      for (int h = 0; h < layout.num_kv_heads; ++h) {
        tile_read_row(tile, role, cache + layout.tile_offset(b, t, h), t % tile.page_size, &row);
        double* xr = x + ((size_t(b) * size_t(layout.t_max) + size_t(t)) * heads + size_t(h)) * d;
        dequantize_row_f64(tile.format, tile.head_dim, row, xr);
      }
    }
  }
}

}  // namespace qdec
