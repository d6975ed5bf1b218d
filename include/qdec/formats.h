// KV-cache formats: what a quantized row is, how it is rounded, and where its bytes live in a tile.
// docs/formats.md is the byte-layout specification; the CPU functions declared here are the ground truth
// that every kernel (decode attention, append) must agree with bit for bit.
//
// Vocabulary
//   row      one token x one KV head: head_dim values, quantized together (one dynamic scale per group).
//   group    a contiguous run of head_dim / groups values sharing one scale (and shift for int4).
//   tile     page_size consecutive tokens of one KV head: their data, then their scales (meta).
//   block16  16 consecutive tokens inside a tile; data is stored per block16 in tensor-core fragment order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qdec/status.h"

namespace qdec {

enum class KvKind : uint8_t {
  kBF16 = 0,
  kFP16,
  kFP8E4M3,  // one fp32 scale per row
  kFP8E5M2,  // one fp32 scale per row
  kINT8,     // symmetric absmax, fp16 scale per group
  kINT4,     // asymmetric, fp16 scale + fp16 shift per group (x = q * scale + shift, q in 0..15)
};

// K or V: the two are stored in different fragment orders (docs/formats.md, "Data order").
enum class KvRole : uint8_t { kKey = 0, kValue = 1 };

constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroups = 8;
constexpr int kBlockTokens = 16;  // tokens per block16

struct KvFormat {
  KvKind kind = KvKind::kBF16;
  // int8 only: values per scale group (32 or 64), or 0 for one group per row.
  int int8_group_size = 0;
  // int4 only: number of groups per row (1 = row-wise, 2, 4, 8).
  int int4_groups = 1;

  static KvFormat bf16() { return {KvKind::kBF16, 0, 1}; }
  static KvFormat fp16() { return {KvKind::kFP16, 0, 1}; }
  static KvFormat fp8_e4m3() { return {KvKind::kFP8E4M3, 0, 1}; }
  static KvFormat fp8_e5m2() { return {KvKind::kFP8E5M2, 0, 1}; }
  static KvFormat int8(int group_size) { return {KvKind::kINT8, group_size, 1}; }
  static KvFormat int4(int groups) { return {KvKind::kINT4, 0, groups}; }

  // Canonical names: bf16 fp16 fp8e4m3 fp8e5m2 int8 int8-g64 int8-g32 int4 int4-g2 int4-g4 int4-g8
  // ("int8" and "int4" are row-wise).
  std::string name() const;
  bool operator==(const KvFormat&) const = default;
};

// Parse a canonical name. Errors name the string and list the accepted names.
Status parse_kv_format(std::string_view name, KvFormat* out);
// Every format qdec implements, in table order (bf16 first).
std::vector<KvFormat> all_kv_formats();

// Bits per stored value (16, 8 or 4).
int kv_bits(KvKind kind);
// Number of scale groups of a row of head_dim values; 0 if the format cannot split head_dim.
int kv_groups(const KvFormat& f, int head_dim);
// Bytes of quantized values per row (head_dim * bits / 8).
int kv_data_bytes(const KvFormat& f, int head_dim);
// Bytes of scales per row: fp8 4 (fp32), int8 2 * groups (fp16), int4 4 * groups (fp16 scale, fp16 shift).
int kv_meta_bytes(const KvFormat& f, int head_dim);
// Bytes per token per KV head, data + meta.
inline int kv_row_bytes(const KvFormat& f, int head_dim) {
  return kv_data_bytes(f, head_dim) + kv_meta_bytes(f, head_dim);
}
// Checks that (format, head_dim) is a valid pair: head_dim in {64, 128, 256}, group size dividing head_dim.
Status validate_kv_format(const KvFormat& f, int head_dim);

// ---- Rounding ground truth (bit-exact with the CUDA intrinsics named in docs/formats.md) ----------------
uint16_t float_to_bf16_bits(float x);  // round to nearest even; NaN -> 0x7FFF (as CUDA)
float bf16_bits_to_float(uint16_t b);
uint16_t float_to_fp16_bits(float x);  // round to nearest even, overflow -> +-Inf, NaN -> 0x7FFF (as CUDA)
float fp16_bits_to_float(uint16_t b);
uint16_t float_to_fp16_bits_satfinite(float x);   // as above, but finite overflow and +-Inf -> +-65504
uint8_t float_to_fp8_bits(float x, KvKind kind);  // RNE, saturating to the largest finite; NaN -> 0x7F (as CUDA)
float fp8_bits_to_float(uint8_t b, KvKind kind);

// ---- One row ----------------------------------------------------------------------------------------
// The logical (unpacked) content of one quantized row.
struct QuantizedRow {
  // One code per value, in logical order: bf16/fp16 bits, fp8 byte, int8 two's-complement byte, int4 nibble.
  uint16_t code[kMaxHeadDim] = {};
  // Per group, exactly as stored: fp16-rounded for int8/int4, fp32 for fp8; 1 / 0 for 16-bit formats.
  float scale[kMaxGroups] = {};
  float shift[kMaxGroups] = {};  // int4 only (fp16-rounded); 0 otherwise
};

struct QuantizeOptions {
  // fp8 only: 0 = dynamic per-row scale (amax / largest finite); > 0 = this fixed scale
  // (1.0 gives plain, scale-free FP8).
  float fp8_static_scale = 0.0f;
};

// Quantize head_dim floats. Defined for all inputs (docs/formats.md, "Special values"): all-zero rows,
// huge values and non-finite values give finite scales.
void quantize_row(const KvFormat& f, int head_dim, const float* x, QuantizedRow* out, const QuantizeOptions& opts = {});
// Dequantize to float (int4: fmaf(q, scale, shift); int8: q * scale; fp8: value * scale).
void dequantize_row(const KvFormat& f, int head_dim, const QuantizedRow& q, float* x);
// Exact dequantized values in double (what the attention reference consumes).
void dequantize_row_f64(const KvFormat& f, int head_dim, const QuantizedRow& q, double* x);

// ---- Tiles ------------------------------------------------------------------------------------------
// Where one KV head's tokens live: a tile of page_size tokens.
struct KvTileLayout {
  KvFormat format;
  int head_dim = 128;
  int page_size = 64;  // tokens per tile; a power of two, 16..256

  int data_bytes_per_token() const { return kv_data_bytes(format, head_dim); }
  int meta_bytes_per_token() const { return kv_meta_bytes(format, head_dim); }
  size_t tile_bytes() const { return size_t(page_size) * kv_row_bytes(format, head_dim); }
  // Offset of the meta region inside a tile.
  size_t meta_offset() const { return size_t(page_size) * data_bytes_per_token(); }
};
Status validate_tile_layout(const KvTileLayout& layout);

// Byte offset (and nibble: 0 low, 1 high; always 0 for 8/16-bit) of value `dim` of token `token`
// (0..page_size-1) inside a tile's data region.
struct DataPosition {
  size_t byte;
  int nibble;
};
DataPosition tile_data_position(const KvTileLayout& layout, KvRole role, int token, int dim);
// Byte offset of group g's (scale[, shift]) entry of `token` inside a tile.
size_t tile_meta_offset(const KvTileLayout& layout, int token, int group);

// Store / load one quantized row into / from a tile (the tile pointer is the start of the tile).
void tile_write_row(const KvTileLayout& layout, KvRole role, uint8_t* tile, int token, const QuantizedRow& q);
void tile_read_row(const KvTileLayout& layout, KvRole role, const uint8_t* tile, int token, QuantizedRow* q);

// ---- Contiguous cache -------------------------------------------------------------------------------
// A contiguous cache for B sequences of up to t_max tokens: [B][pages_per_seq][num_kv_heads][tile],
// pages_per_seq = ceil(t_max / page_size). It is the paged layout with the identity block table.
struct ContiguousKvLayout {
  KvTileLayout tile;
  int batch = 1;
  int t_max = 1;
  int num_kv_heads = 1;

  int pages_per_seq() const { return (t_max + tile.page_size - 1) / tile.page_size; }
  size_t page_bytes() const { return size_t(num_kv_heads) * tile.tile_bytes(); }
  size_t total_bytes() const { return size_t(batch) * pages_per_seq() * page_bytes(); }
  // Start of the tile holding token t of sequence b, head h.
  size_t tile_offset(int b, int t, int h) const {
    return (size_t(b) * pages_per_seq() + size_t(t / tile.page_size)) * page_bytes() + size_t(h) * tile.tile_bytes();
  }
};

// Quantize x [batch][t_max][num_kv_heads][head_dim] (only tokens t < seq_lens[b]) into a contiguous cache
// buffer of layout.total_bytes() bytes. Bytes of tokens >= seq_lens[b] are left untouched.
void quantize_into_cache(const ContiguousKvLayout& layout, KvRole role, const float* x, const int32_t* seq_lens,
                         uint8_t* cache, const QuantizeOptions& opts = {});
// Exact dequantized values [batch][t_max][num_kv_heads][head_dim] in double; tokens >= seq_lens[b] are 0.
void dequantize_cache_f64(const ContiguousKvLayout& layout, KvRole role, const uint8_t* cache, const int32_t* seq_lens,
                          double* x);

}  // namespace qdec
