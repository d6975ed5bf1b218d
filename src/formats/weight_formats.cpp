// Weight formats on the CPU: names, the packed layout of docs/formats.md ("Weight formats"), the quantizers,
// exact dequantization, and the exact import of GGUF Q4_0 / Q4_1 / Q8_0 tensors. This file is the ground truth
// the GEMM kernels are tested against.
#include "qdec/weight_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "qdec/formats.h"

namespace qdec {

namespace {

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

float fp16_satfinite(float x) {
  return fp16_bits_to_float(float_to_fp16_bits_satfinite(x));
}

uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

Status validate_shape(int n, int k) {
  if (n < 1) return invalid("N " + std::to_string(n) + " must be >= 1");
  if (k < 1) return invalid("K " + std::to_string(k) + " must be >= 1");
  if (static_cast<long long>(n) * k > (1LL << 40)) return invalid("N * K is too large");
  return Status::Ok();
}

// Meta entry (group, row) address in the packed meta.
uint8_t* meta_at(PackedWeights* w, int group, int row) {
  return w->meta.data() +
         (static_cast<size_t>(group) * w->layout.n_pad() + row) * weight_meta_entry_bytes(w->layout.format.kind);
}
const uint8_t* meta_at(const PackedWeights& w, int group, int row) {
  return w.meta.data() +
         (static_cast<size_t>(group) * w.layout.n_pad() + row) * weight_meta_entry_bytes(w.layout.format.kind);
}

void allocate_packed(const WeightLayout& layout, PackedWeights* out) {
  out->layout = layout;
  out->codes.assign(layout.code_bytes(), 0);
  out->meta.assign(layout.meta_bytes(), 0);
  // int8 codes are stored as q + 128: padding holds code 0 (byte 128).
  if (layout.format.kind == WeightKind::kINT8) std::fill(out->codes.begin(), out->codes.end(), uint8_t{128});
}

void put_code(PackedWeights* w, int row, int col, int code) {
  int nibble = 0;
  const size_t off = w->layout.code_offset(row, col, &nibble);
  if (w->layout.format.kind == WeightKind::kINT8) {
    w->codes[off] = static_cast<uint8_t>(code + 128);
  } else {
    uint8_t& b = w->codes[off];
    b = static_cast<uint8_t>(nibble ? (b & 0x0F) | (code << 4) : (b & 0xF0) | code);
  }
}

}  // namespace

std::string WeightFormat::name() const {
  std::string base = kind == WeightKind::kINT4 ? "int4" : kind == WeightKind::kINT4ZeroPoint ? "int4zp" : "int8";
  return group_size == 0 ? base : base + "-g" + std::to_string(group_size);
}

Status validate_weight_format(const WeightFormat& f) {
  if (f.kind != WeightKind::kINT4 && f.kind != WeightKind::kINT4ZeroPoint && f.kind != WeightKind::kINT8)
    return invalid("weight kind " + std::to_string(static_cast<int>(f.kind)) + " is not a WeightKind");
  if (f.group_size != 0 && f.group_size != 32 && f.group_size != 64 && f.group_size != 128)
    return invalid("group_size " + std::to_string(f.group_size) +
                   " is not supported (supported: 32, 64, 128, 0 = per output channel)");
  return Status::Ok();
}

Status parse_weight_format(const std::string& name, WeightFormat* out) {
  const char* kinds[] = {"int4zp", "int4", "int8"};
  const WeightKind kk[] = {WeightKind::kINT4ZeroPoint, WeightKind::kINT4, WeightKind::kINT8};
  for (int i = 0; i < 3; ++i) {
    const std::string k = kinds[i];
    if (name.rfind(k, 0) != 0) continue;
    const std::string rest = name.substr(k.size());
    WeightFormat f;
    f.kind = kk[i];
    if (rest.empty()) {
      f.group_size = 0;
    } else if (rest == "-g32" || rest == "-g64" || rest == "-g128") {
      f.group_size = std::stoi(rest.substr(2));
    } else {
      break;
    }
    *out = f;
    return Status::Ok();
  }
  return invalid("weight format '" + name +
                 "' is not known (int4, int4zp or int8, with -g32, -g64, -g128 or nothing for per channel)");
}

size_t WeightLayout::code_offset(int row, int col, int* nibble) const {
  const int chunk = weight_chunk_k(format.kind);
  const size_t tile = static_cast<size_t>(row / 16) * (k_pad() / chunk) + col / chunk;
  const int r = row % 16, c = col % chunk;
  const int s = c / 16, cc = c % 16;
  const int g = r % 8, hi = r / 8;
  const int t = (cc % 8) / 2, e = cc % 2, khalf = cc / 8;
  const int lane = g * 4 + t;
  const int reg = hi + 2 * khalf;  // A-fragment register a0..a3
  if (format.kind == WeightKind::kINT8) {
    *nibble = 0;
    return tile * 512 + lane * 16 + s * 8 + reg * 2 + e;
  }
  const int nib = reg + 4 * e;  // register r holds nibbles r (low half) and r + 4 (high half)
  *nibble = nib % 2;
  return tile * 512 + lane * 16 + s * 4 + nib / 2;
}

Status pack_weights(const WeightLayout& layout, const int8_t* codes, const uint16_t* scales, const uint16_t* second,
                    PackedWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_weight_format(layout.format));
  QDEC_RETURN_IF_ERROR(validate_shape(layout.n, layout.k));
  const WeightKind kind = layout.format.kind;
  const int lo = kind == WeightKind::kINT8 ? -128 : 0, hi = kind == WeightKind::kINT8 ? 127 : 15;
  for (size_t i = 0; i < size_t(layout.n) * layout.k; ++i) {
    if (codes[i] < lo || codes[i] > hi)
      return invalid("code " + std::to_string(codes[i]) + " at index " + std::to_string(i) + " is outside " +
                     std::to_string(lo) + ".." + std::to_string(hi) + " for " + layout.format.name());
  }
  PackedWeights w;
  allocate_packed(layout, &w);
  const int groups = layout.num_groups();
  for (int r = 0; r < layout.n; ++r) {
    for (int c = 0; c < layout.k; ++c) put_code(&w, r, c, codes[size_t(r) * layout.k + c]);
    for (int g = 0; g < groups; ++g) {
      uint8_t* m = meta_at(&w, g, r);
      store_u16(m, scales[size_t(r) * groups + g]);
      if (kind != WeightKind::kINT8) store_u16(m + 2, second[size_t(r) * groups + g]);
    }
  }
  *out = std::move(w);
  return Status::Ok();
}

Status quantize_weights(const float* x, int n, int k, const WeightFormat& format, PackedWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_weight_format(format));
  QDEC_RETURN_IF_ERROR(validate_shape(n, k));
  if (!x) return invalid("weights pointer is null");
  const WeightLayout layout{format, n, k};
  const int groups = layout.num_groups(), gk = layout.group_k();
  std::vector<int8_t> codes(size_t(n) * k, 0);
  std::vector<uint16_t> scales(size_t(n) * groups, 0), second(size_t(n) * groups, 0);
  for (int r = 0; r < n; ++r) {
    for (int g = 0; g < groups; ++g) {
      const int c0 = g * gk, c1 = std::min(k, c0 + gk);
      const float* xr = x + size_t(r) * k;
      int8_t* qr = codes.data() + size_t(r) * k;
      const size_t mi = size_t(r) * groups + g;
      if (format.kind == WeightKind::kINT8) {
        float amax = 0.0f;
        for (int c = c0; c < c1; ++c)
          if (std::isfinite(xr[c])) amax = std::max(amax, std::fabs(xr[c]));
        const float s = fp16_satfinite(amax / 127.0f);
        scales[mi] = float_to_fp16_bits(s);
        if (s == 0.0f) continue;
        for (int c = c0; c < c1; ++c) {
          const float q = std::rint(xr[c] / s);
          qr[c] = static_cast<int8_t>(std::isnan(q) ? 0 : std::clamp(q, -127.0f, 127.0f));
        }
        continue;
      }
      float lo = 0.0f, hi = 0.0f;
      bool any = false;
      for (int c = c0; c < c1; ++c) {
        const float v = xr[c];
        if (!std::isfinite(v)) continue;
        if (!any || v < lo || (v == lo && std::signbit(v))) lo = v;
        if (!any || v > hi || (v == hi && !std::signbit(v))) hi = v;
        any = true;
      }
      if (!any) continue;  // scale 0, offset / zero point 0, codes 0
      if (format.kind == WeightKind::kINT4) {
        const float s = fp16_satfinite((hi - lo) / 15.0f);
        const float o = fp16_satfinite(lo);
        scales[mi] = float_to_fp16_bits(s);
        second[mi] = float_to_fp16_bits(o);
        if (s == 0.0f) continue;
        for (int c = c0; c < c1; ++c) {
          const float q = std::rint((xr[c] - o) / s);
          qr[c] = static_cast<int8_t>(std::isnan(q) ? 0 : std::clamp(q, 0.0f, 15.0f));
        }
      } else {  // zero point: the range is widened to hold 0, z = rint(-lo / s) in 0..15
        lo = std::min(lo, 0.0f);
        hi = std::max(hi, 0.0f);
        const float s = fp16_satfinite((hi - lo) / 15.0f);
        scales[mi] = float_to_fp16_bits(s);
        if (s == 0.0f) continue;
        const float z = std::clamp(std::rint(-lo / s), 0.0f, 15.0f);
        second[mi] = float_to_fp16_bits(z);
        for (int c = c0; c < c1; ++c) {
          const float q = std::rint(xr[c] / s) + z;
          qr[c] = static_cast<int8_t>(std::isnan(q) ? 0 : std::clamp(q, 0.0f, 15.0f));
        }
      }
    }
  }
  return pack_weights(layout, codes.data(), scales.data(), second.data(), out);
}

Status quantize_weights_bf16(const uint16_t* w_bits, int n, int k, const WeightFormat& format, PackedWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_shape(n, k));
  if (!w_bits) return invalid("weights pointer is null");
  std::vector<float> f(size_t(n) * k);
  for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_bits_to_float(w_bits[i]);
  return quantize_weights(f.data(), n, k, format, out);
}

int packed_code(const PackedWeights& w, int row, int col) {
  int nibble = 0;
  const size_t off = w.layout.code_offset(row, col, &nibble);
  const uint8_t b = w.codes[off];
  if (w.layout.format.kind == WeightKind::kINT8) return static_cast<int>(b) - 128;
  return nibble ? b >> 4 : b & 0x0F;
}

void dequantize_weights_f64(const PackedWeights& w, double* out) {
  const WeightLayout& L = w.layout;
  const int gk = L.group_k();
  for (int r = 0; r < L.n; ++r) {
    for (int c = 0; c < L.k; ++c) {
      const uint8_t* m = meta_at(w, c / gk, r);
      const double s = fp16_bits_to_float(load_u16(m));
      const double q = packed_code(w, r, c);
      double v;
      switch (L.format.kind) {
        case WeightKind::kINT4:
          v = q * s + static_cast<double>(fp16_bits_to_float(load_u16(m + 2)));
          break;
        case WeightKind::kINT4ZeroPoint:
          v = (q - static_cast<double>(fp16_bits_to_float(load_u16(m + 2)))) * s;
          break;
        default:
          v = q * s;
          break;
      }
      out[size_t(r) * L.k + c] = v;
    }
  }
}

Status import_gguf_weights(GgmlType type, const uint8_t* data, size_t bytes, int n, int k, PackedWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_shape(n, k));
  if (!data) return invalid("GGUF data pointer is null");
  size_t block_bytes = 0;
  WeightFormat f;
  f.group_size = 32;
  switch (type) {
    case GgmlType::kQ4_0:
      block_bytes = 18;
      f.kind = WeightKind::kINT4ZeroPoint;
      break;
    case GgmlType::kQ4_1:
      block_bytes = 20;
      f.kind = WeightKind::kINT4;
      break;
    case GgmlType::kQ8_0:
      block_bytes = 34;
      f.kind = WeightKind::kINT8;
      break;
    default:
      return Status(StatusCode::kUnsupported, std::string("GGUF type ") + ggml_type_name(type) +
                                                  " cannot be imported (supported: q4_0, q4_1, q8_0)");
  }
  if (k % 32 != 0) return invalid("K " + std::to_string(k) + " is not a multiple of the GGUF block size 32");
  const size_t want = size_t(n) * (k / 32) * block_bytes;
  if (bytes != want)
    return invalid("GGUF data holds " + std::to_string(bytes) + " bytes; " + std::to_string(n) + " x " +
                   std::to_string(k) + " " + ggml_type_name(type) + " needs " + std::to_string(want));
  const int groups = k / 32;
  std::vector<int8_t> codes(size_t(n) * k);
  std::vector<uint16_t> scales(size_t(n) * groups), second(size_t(n) * groups, 0);
  for (int r = 0; r < n; ++r) {
    for (int g = 0; g < groups; ++g) {
      const uint8_t* b = data + (size_t(r) * groups + g) * block_bytes;
      int8_t* q = codes.data() + size_t(r) * k + g * 32;
      const size_t mi = size_t(r) * groups + g;
      scales[mi] = load_u16(b);
      if (type == GgmlType::kQ8_0) {
        for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(b[2 + j]);
        continue;
      }
      // Q4_0: w = (q - 8) d -> zero point 8 (fp16 0x4800). Q4_1: w = q d + m -> offset m.
      second[mi] = type == GgmlType::kQ4_0 ? uint16_t{0x4800} : load_u16(b + 2);
      const uint8_t* qs = b + (type == GgmlType::kQ4_0 ? 2 : 4);
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>(qs[j] & 0x0F);
        q[j + 16] = static_cast<int8_t>(qs[j] >> 4);
      }
    }
  }
  return pack_weights(WeightLayout{f, n, k}, codes.data(), scales.data(), second.data(), out);
}

Status import_gguf_tensor(const GgufFile& file, const GgufTensorInfo& info, PackedWeights* out) {
  if (info.dims.size() != 2)
    return invalid("GGUF tensor '" + info.name + "' has " + std::to_string(info.dims.size()) +
                   " dimensions; a weight matrix has 2");
  if (info.dims[0] > (1u << 24) || info.dims[1] > (1u << 24))
    return invalid("GGUF tensor '" + info.name + "' is too large (" + std::to_string(info.dims[1]) + " x " +
                   std::to_string(info.dims[0]) + ")");
  return import_gguf_weights(info.type, file.tensor_data(info), static_cast<size_t>(info.num_bytes),
                             static_cast<int>(info.dims[1]), static_cast<int>(info.dims[0]), out);
}

}  // namespace qdec
