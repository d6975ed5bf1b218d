// Fused GQA decode attention over a quantized KV cache: O = softmax(Q K^T * sm_scale) V for one query
// token per sequence.
//
//   Q, O      [batch, num_qo_heads, head_dim]   bf16 or fp16 (same dtype for both)
//   K, V      tiles (docs/formats.md) addressed through a page index:
//               page = block_table ? block_table[b * max_pages_per_seq + t / page_size]
//                                  : b * max_pages_per_seq + t / page_size        (contiguous cache)
//               K tile of (page, h) = k_cache + page * k_page_stride_bytes + h * k_tile_bytes
//               (V likewise); a paged pool can put K and V of a page in one allocation
//   seq_lens  [batch] int32 on the device (and the same values on the host, for validation and planning)
//   lse       optional [batch, num_qo_heads] float: natural-log sum of exp of the scaled scores
//
// group_size = num_qo_heads / num_kv_heads query heads share one KV head; query head q uses KV head
// q / group_size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qdec/formats.h"
#include "qdec/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace qdec {

enum class DType : uint8_t { kBF16 = 0, kFP16 };
const char* dtype_name(DType d);

struct DecodeAttentionParams {
  // Problem.
  int batch = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float sm_scale = 0.0f;  // 0 means 1/sqrt(head_dim)
  DType q_dtype = DType::kBF16;

  // Cache.
  KvFormat k_format;
  KvFormat v_format;
  int page_size = 64;                    // tokens per tile, a power of two in 16..256
  int max_pages_per_seq = 0;             // pages reserved per sequence (contiguous: ceil(t_max / page_size))
  int num_pages = 0;                     // pages in the pool (contiguous: batch * max_pages_per_seq)
  size_t k_page_stride_bytes = 0;        // bytes between consecutive pages of k_cache (>= num_kv_heads * K tile)
  size_t v_page_stride_bytes = 0;        // bytes between consecutive pages of v_cache (>= num_kv_heads * V tile)
  const void* k_cache = nullptr;         // device, 16-byte aligned
  const void* v_cache = nullptr;         // device, 16-byte aligned
  const int32_t* block_table = nullptr;  // device [batch, max_pages_per_seq]; nullptr = contiguous
  // Host copy of block_table (required with it): the entries a sequence uses (its first
  // ceil(seq_len / page_size)) are validated to lie in 0..num_pages-1 before the launch.
  const int32_t* block_table_host = nullptr;

  // Lengths.
  const int32_t* seq_lens = nullptr;       // device [batch], each in 1..max_pages_per_seq * page_size
  const int32_t* seq_lens_host = nullptr;  // host copy of the same values (validated, used for planning)

  // Tensors (device).
  const void* q = nullptr;  // [batch, num_qo_heads, head_dim], 16-byte aligned
  void* o = nullptr;        // [batch, num_qo_heads, head_dim], 16-byte aligned
  float* lse = nullptr;     // optional [batch, num_qo_heads]

  // Overlap with this step's append (PDL, sm_90). When > 0, the call is launched as a programmatic
  // dependent of the kernel before it in the stream, typically kv_append(), which then may still be running
  // while this one reads Q and the cache. That kernel may write only the last `programmatic_tail_tokens`
  // tokens of each sequence: this one waits for it to complete (and its writes to be visible) only before
  // reading those tokens. Q, and everything the previous kernel did not write, must be complete when the
  // previous kernel starts, so launch that kernel normally. 0 = ordinary stream order. A split plan whose grid is one
  // wave of several CTAs per SM is launched in stream order even so (measured faster there on the H200:
  // docs/kvcache.md, "Session 38"); the results are the same either way.
  int programmatic_tail_tokens = 0;

  // Split-K over the sequence: 0 = automatic (occupancy and length), >= 1 = forced.
  int num_splits = 0;
  // Warps per CTA (a tuning override, like num_splits): 0 = automatic; otherwise the compiled value, 8 at
  // head_dim 128 and 4 at head_dim 64, or 16 for int4 V caches (int4, int4-gN, the int8 / int4 pairs) at head_dim
  // 128 and group_size <= 8. Automatic picks 16 there when it saves the split-K (docs/attention.md, v22), and, where
  // two 8-warp split CTAs would share an SM (an H200), for splits of >= 8192 tokens (one CTA per SM; "Session 36").
  int cta_warps = 0;
  // Workspace for split partials (device); decode_attention_workspace_bytes() says how much.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of device workspace the call needs (0 when it will not split).
Status decode_attention_workspace_bytes(const DecodeAttentionParams& p, size_t* bytes);
// The split count the call will use (after validation).
Status decode_attention_num_splits(const DecodeAttentionParams& p, int* num_splits);
// The warps per CTA the call will use (after validation).
Status decode_attention_cta_warps(const DecodeAttentionParams& p, int* cta_warps);
// Validate, then launch on `stream`. On error nothing is launched.
Status decode_attention(const DecodeAttentionParams& p, cudaStream_t stream);

// Helpers to fill the cache fields of params for a contiguous cache (separate K and V buffers).
void set_contiguous_cache(DecodeAttentionParams* p, const ContiguousKvLayout& k_layout, const void* k_cache,
                          const ContiguousKvLayout& v_layout, const void* v_cache);

// ---- CPU reference ----------------------------------------------------------------------------------
// float64 decode attention on dequantized K/V [batch][t_max][num_kv_heads][head_dim] (tokens >= seq_lens[b]
// ignored), Q [batch][num_qo_heads][head_dim]; O same shape; lse [batch][num_qo_heads] (natural log).
void decode_attention_reference(int batch, int num_qo_heads, int num_kv_heads, int head_dim, int t_max, double sm_scale,
                                const double* q, const double* k, const double* v, const int32_t* seq_lens, double* o,
                                double* lse);

}  // namespace qdec
