// KV-cache capacity planner: how many tokens (and sequences of a given context) fit in the GPU memory left
// after the weights, for each qdec KV format. The arithmetic, its assumptions and a worked example are in
// docs/kvcache.md, "Capacity planner"; `qdec plan` is the command-line front end.
//
// Units: every size is in bytes; the text forms accept GB (10^9 bytes) and GiB (2^30 bytes).
//
//   kv_heads_per_gpu     num_kv_heads / gpus, or 1 when num_kv_heads < gpus (each KV head is then replicated
//                        on gpus / num_kv_heads GPUs, as tensor parallelism over the query heads requires)
//   bytes_per_token_gpu  num_layers * kv_heads_per_gpu * (kv_row_bytes(K format) + kv_row_bytes(V format))
//   weights_per_gpu      num_params * weight_bytes_per_param / gpus   (weights split evenly)
//   kv_bytes_per_gpu     gpu_mem_bytes - reserve_bytes - weights_per_gpu
//   tokens               floor(kv_bytes_per_gpu / bytes_per_token_gpu)   (every GPU holds every token)
//   pages                floor(tokens / page_size)
//   max_batch            floor(pages / ceil(context / page_size))
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qdec/formats.h"
#include "qdec/status.h"

namespace qdec {

// The shape of a Llama-family decoder (what KV memory and weight memory depend on).
struct ModelShape {
  std::string name;  // preset name, or "custom"
  int num_layers = 0;
  int hidden = 0;        // 0 if unknown (explicit shapes)
  int intermediate = 0;  // MLP width; 0 if unknown
  int num_qo_heads = 0;  // 0 if unknown
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;  // 0 if unknown
  bool tied_embeddings = false;
  int64_t num_params = 0;  // parameter count (presets: computed from the shape, equal to the published count)
};

// Presets: llama-2-7b, llama-2-70b, llama-3-8b, llama-3-70b, smollm2-135m (published Hugging Face configs).
std::vector<std::string> model_preset_names();
Status model_preset(std::string_view name, ModelShape* out);
// Parameters of a Llama-family decoder from its shape: embeddings (+ untied output head), per layer the q, k, v, o
// projections, the gated MLP (3 matrices) and two RMSNorm vectors, and the final norm. Needs hidden,
// intermediate, num_qo_heads, num_kv_heads, head_dim, vocab.
int64_t llama_param_count(const ModelShape& m);

struct PlanOptions {
  ModelShape model;
  int64_t gpu_mem_bytes = 0;          // memory of one GPU
  int gpus = 1;                       // tensor-parallel degree
  double weight_bytes_per_param = 2;  // 2 = bf16/fp16 weights, 1 = 8-bit, 0.5 = 4-bit (scales not counted)
  int64_t reserve_bytes = 0;          // per GPU: activations, workspaces, CUDA context (`qdec plan`: 2 GB)
  int context = 4096;                 // tokens per sequence (prompt + generated) for max_batch
  int page_size = 64;                 // tokens per page of the paged cache (power of two)
};

struct PlanRow {
  KvFormat k_format;
  KvFormat v_format;
  int kv_heads_per_gpu = 0;
  int kv_head_replicas = 1;              // GPUs holding a copy of each KV head (> 1 when num_kv_heads < gpus)
  int64_t bytes_per_token_gpu = 0;       // K + V of one token on one GPU, data and scales
  int64_t bytes_per_token_all_gpus = 0;  // bytes_per_token_gpu * gpus (replicas counted)
  int64_t bytes_per_token_logical = 0;   // one copy of every KV head (no replicas)
  int64_t weight_bytes_per_gpu = 0;
  int64_t kv_bytes_per_gpu = 0;  // memory left for the KV cache on each GPU
  int64_t tokens = 0;            // tokens that fit (per GPU = in total: every GPU holds all tokens)
  int64_t pages = 0;             // pages of page_size tokens that fit
  int64_t pages_per_seq = 0;     // ceil(context / page_size)
  int64_t max_batch = 0;         // sequences of `context` tokens that fit
};

// Validates the options (every count >= 1, head_dim and formats valid together, num_kv_heads and gpus dividing
// one another, num_qo_heads (when known) divisible by gpus, weights fitting in memory) and fills one row. Errors name
// the offending value.
Status plan_capacity(const PlanOptions& opts, const KvFormat& k_format, const KvFormat& v_format, PlanRow* row);
inline Status plan_capacity(const PlanOptions& opts, const KvFormat& format, PlanRow* row) {
  return plan_capacity(opts, format, format, row);
}
// One row per format of all_kv_formats() (K and V in the same format), in that order.
Status plan_all_formats(const PlanOptions& opts, std::vector<PlanRow>* rows);

// "80GB", "80 GB", "80G" -> 80 * 10^9; "80GiB", "80Gi" -> 80 * 2^30; also MB/MiB, TB/TiB, "B" (bytes); a bare
// number is GB. Fractions are accepted ("0.5GiB"); the result is rounded down to whole bytes.
Status parse_memory_size(std::string_view text, int64_t* bytes);
// "70B" / "70b" -> 70 * 10^9, "135M" -> 135 * 10^6, "6.74e9", "68976648192".
Status parse_param_count(std::string_view text, int64_t* params);

}  // namespace qdec
