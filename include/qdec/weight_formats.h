// Weight formats for the weight-only quantized GEMM/GEMV and convolution (docs/formats.md, "Weight formats",
// is the byte layout; src/formats/weight_formats.cpp is the CPU ground truth).
//
//   int4      uint4 codes, per group along K: fp16 scale s and fp16 offset o, w = q * s + o      (seed 003)
//   int4-zp   uint4 codes, per group along K: fp16 scale s and zero point z (fp16 integer), w = (q - z) * s
//   int8      int8 codes, symmetric, per group along K: fp16 scale s, w = q * s
// Group sizes 32, 64, 128 along K, or per output channel (group_size 0: one group spans all of K). K need not
// be a multiple of the group: the last group of a row is shorter.
//
// W is logically [N, K] row-major (N output channels, K reduction). The packed form the kernels read pads N
// to a multiple of 16 and K to a multiple of the chunk (64 values for int4, 32 for int8) and stores codes in
// mma.m16n8k16 A-fragment order, so one warp's 16-byte-per-lane load is one 16 x 64 (int4) or 16 x 32 (int8)
// tile and a lane dequantizes its own fragment in registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qdec/gguf.h"
#include "qdec/status.h"

namespace qdec {

enum class WeightKind : uint8_t { kINT4 = 0, kINT4ZeroPoint, kINT8 };

struct WeightFormat {
  WeightKind kind = WeightKind::kINT4;
  int group_size = 128;  // 32, 64, 128; 0 = per output channel (one group of K values)

  // "int4-g128", "int4zp-g32", "int8-g64", "int8" (per channel), "int4" (per channel).
  std::string name() const;
  bool operator==(const WeightFormat& o) const { return kind == o.kind && group_size == o.group_size; }
};

// Parses the names of WeightFormat::name().
Status parse_weight_format(const std::string& name, WeightFormat* out);
// InvalidArgument naming the group size unless it is 0, 32, 64 or 128.
Status validate_weight_format(const WeightFormat& f);

inline int weight_bits(WeightKind k) {
  return k == WeightKind::kINT8 ? 8 : 4;
}
// Values along K per 512-byte tile of 16 rows: 64 (int4) or 32 (int8).
inline int weight_chunk_k(WeightKind k) {
  return k == WeightKind::kINT8 ? 32 : 64;
}
// Bytes of one (group, row) meta entry: int4 fp16 (scale, offset | zero point); int8 fp16 scale.
inline int weight_meta_entry_bytes(WeightKind k) {
  return k == WeightKind::kINT8 ? 2 : 4;
}

// Geometry of a packed weight (docs/formats.md).
struct WeightLayout {
  WeightFormat format;
  int n = 0;  // output channels
  int k = 0;  // reduction length

  int n_pad() const { return (n + 15) / 16 * 16; }
  int k_pad() const {
    const int c = weight_chunk_k(format.kind);
    return (k + c - 1) / c * c;
  }
  // The group length used by the layout (per channel: K).
  int group_k() const { return format.group_size == 0 ? k : format.group_size; }
  int num_groups() const { return format.group_size == 0 ? 1 : (k + format.group_size - 1) / format.group_size; }
  size_t code_bytes() const { return size_t(n_pad()) * k_pad() * weight_bits(format.kind) / 8; }
  size_t meta_bytes() const { return size_t(num_groups()) * n_pad() * weight_meta_entry_bytes(format.kind); }
  // Byte offset of code (row, col) in the packed codes and, for int4, the nibble (0 = bits 0..3).
  size_t code_offset(int row, int col, int* nibble) const;
};

// A packed weight in host memory: codes (docs/formats.md tile order) and meta ([num_groups][n_pad] entries).
struct PackedWeights {
  WeightLayout layout;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> meta;
};

// Quantize a row-major [n, k] weight (fp32 or bf16 bits) and pack it. Non-finite inputs follow the KV rules
// of docs/formats.md (scales from the finite values only).
Status quantize_weights(const float* w, int n, int k, const WeightFormat& format, PackedWeights* out);
Status quantize_weights_bf16(const uint16_t* w_bits, int n, int k, const WeightFormat& format, PackedWeights* out);

// The integer code of (row, col) (int4: 0..15, int8: -127..127) and the group's meta, read from the packed form.
int packed_code(const PackedWeights& w, int row, int col);
// Dequantized values, exactly (q * s + o, (q - z) * s, q * s are exact in double). out: [n, k] row-major.
void dequantize_weights_f64(const PackedWeights& w, double* out);

// Pack codes and meta given directly (the import path and hand-written tests): codes [n, k] row-major
// (int4: 0..15, int8: -127..127 or -128), scales/second [n, num_groups] fp16 bits (second: offset for int4,
// zero point for int4-zp, ignored for int8).
Status pack_weights(const WeightLayout& layout, const int8_t* codes, const uint16_t* scales, const uint16_t* second,
                    PackedWeights* out);

// Exact import of a GGUF tensor of type Q4_0 (-> int4zp-g32, z = 8), Q4_1 (-> int4-g32, o = m) or Q8_0
// (-> int8-g32). `data` holds n rows of k values (ggml row = one output channel), `bytes` exactly their size.
Status import_gguf_weights(GgmlType type, const uint8_t* data, size_t bytes, int n, int k, PackedWeights* out);
// The same for a 2-D tensor of an open GGUF file: K = dims[0] (contiguous), N = dims[1].
Status import_gguf_tensor(const GgufFile& file, const GgufTensorInfo& info, PackedWeights* out);

}  // namespace qdec
