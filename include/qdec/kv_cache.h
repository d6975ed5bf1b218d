// Paged quantized KV cache on the GPU: the page pool (one allocation), and the fused append kernel that
// applies RoPE to new K rows and quantizes new K and V rows into their pages (docs/kvcache.md).
//
//   pool      [num_pages][page]; page = [num_kv_heads][K tile] then [num_kv_heads][V tile]
//             (a tile is page_size tokens of one KV head, data then scales: docs/formats.md), so one
//             block-table lookup reaches the data and the scales of K and V for every head of a page
//   k, v      new rows [num_tokens, num_kv_heads, head_dim], bf16 or fp16
//   token i of sequence b lands at position start_pos[b] + (i - cu_seqlens[b]) of that sequence, i.e. in
//   page block_table[b * max_pages_per_seq + pos / page_size], slot pos % page_size
//
// The host-side bookkeeping of which page belongs to which sequence is the PageManager (page_manager.h);
// this file only knows pages by index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "qdec/attention.h"
#include "qdec/formats.h"
#include "qdec/status.h"

namespace qdec {

// ---- Page layout ------------------------------------------------------------------------------------
struct KvPageLayout {
  KvFormat k_format;
  KvFormat v_format;
  int head_dim = 128;
  int page_size = 64;  // tokens per page: a power of two, 16..256 (the block16 fragment order needs >= 16)
  int num_kv_heads = 1;

  KvTileLayout k_tile() const { return {k_format, head_dim, page_size}; }
  KvTileLayout v_tile() const { return {v_format, head_dim, page_size}; }
  size_t k_bytes_per_page() const { return size_t(num_kv_heads) * k_tile().tile_bytes(); }
  size_t v_bytes_per_page() const { return size_t(num_kv_heads) * v_tile().tile_bytes(); }
  size_t page_bytes() const { return k_bytes_per_page() + v_bytes_per_page(); }
  // Offsets inside the pool of the K and V tiles of (page, head).
  size_t k_tile_offset(int page, int head) const {
    return size_t(page) * page_bytes() + size_t(head) * k_tile().tile_bytes();
  }
  size_t v_tile_offset(int page, int head) const {
    return size_t(page) * page_bytes() + k_bytes_per_page() + size_t(head) * v_tile().tile_bytes();
  }
};
// Formats valid for head_dim, page_size a power of two in 16..256, num_kv_heads >= 1.
Status validate_page_layout(const KvPageLayout& layout);

// Fill the cache fields of decode-attention params for a pool at `pool` (device) read through
// `block_table` ([batch, max_pages_per_seq], device) with its host copy `block_table_host`.
void set_paged_cache(DecodeAttentionParams* p, const KvPageLayout& layout, const void* pool, int num_pages,
                     const int32_t* block_table, const int32_t* block_table_host, int max_pages_per_seq);

// ---- Page pool (device memory) ----------------------------------------------------------------------
// One cudaMalloc of num_pages * page_bytes bytes. Page contents are undefined until appended to.
class KvPagePool {
 public:
  static Status create(const KvPageLayout& layout, int num_pages, std::unique_ptr<KvPagePool>* out);
  ~KvPagePool();
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  const KvPageLayout& layout() const { return layout_; }
  int num_pages() const { return num_pages_; }
  size_t bytes() const { return size_t(num_pages_) * layout_.page_bytes(); }
  void* data() const { return data_; }

 private:
  KvPagePool(const KvPageLayout& layout, int num_pages, void* data)
      : layout_(layout), num_pages_(num_pages), data_(data) {}
  KvPageLayout layout_;
  int num_pages_ = 0;
  void* data_ = nullptr;
};

// ---- Append (RoPE on K, quantize per token and head, write into pages) -----------------------------
enum class RopeStyle : uint8_t {
  kNone = 0,
  kHalf,         // rotate-half (Hugging Face Llama, GPT-NeoX): dims i and i + rotary_dim / 2 rotate together
  kInterleaved,  // GPT-J / ggml "normal" mode: dims 2i and 2i + 1 rotate together
};
const char* rope_style_name(RopeStyle s);

struct KvAppendParams {
  // New rows (device): [num_tokens, num_kv_heads, head_dim] in `dtype`, 16-byte aligned.
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kBF16;
  int batch = 0;
  // Decode: nullptr, one token per sequence (num_tokens = batch). Prefill: device [batch + 1] prefix sums
  // of the run lengths (cu_seqlens[0] = 0; runs may be empty), with its host copy.
  const int32_t* cu_seqlens = nullptr;
  const int32_t* cu_seqlens_host = nullptr;
  // Device [batch]: the position of each sequence's first new token (its length before the append), and
  // the host copy (validated against max_pages_per_seq and the block table).
  const int32_t* start_pos = nullptr;
  const int32_t* start_pos_host = nullptr;

  // The pool and how sequences map onto it (device block table + host copy, as for decode attention).
  KvPageLayout layout;
  void* pool = nullptr;
  int num_pages = 0;
  const int32_t* block_table = nullptr;
  const int32_t* block_table_host = nullptr;
  int max_pages_per_seq = 0;

  // RoPE on K (V is never rotated): angle = position * theta^(-2i / rotary_dim) for pair i.
  RopeStyle rope = RopeStyle::kNone;
  float rope_theta = 10000.0f;
  int rotary_dim = 0;  // 0 = head_dim; else even, <= head_dim (dims >= rotary_dim pass through)

  QuantizeOptions quant;  // fp8 static scale (0 = dynamic)
};

// Validate (everything, before any launch), then launch on `stream`.
Status kv_append(const KvAppendParams& p, cudaStream_t stream);

// CPU ground truth of kv_append: every pointer in `p` is a host pointer (k, v, cu_seqlens, start_pos,
// block_table; `pool` is a host image of the pool). The GPU kernel must produce identical bytes.
Status kv_append_reference(const KvAppendParams& p);

// RoPE as kv_append applies it, on one row of floats (exposed for tests and for the CPU model).
// cos/sin are computed in double and rounded to float; the rotation is a' = fma(a, c, -(b s)),
// b' = fma(b, c, a s) in float.
void rope_row_reference(RopeStyle style, int head_dim, int rotary_dim, float theta, int position, float* x);

}  // namespace qdec
