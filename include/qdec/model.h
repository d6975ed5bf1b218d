// Llama-family reference forward on the CPU, float32 and multi-threaded, with the KV cache held through the
// qdec formats library (docs/model.md, "Reference forward").
//
//   LlamaModel   hyper-parameters from the GGUF `llama.*` keys and every weight dequantized to fp32 once at load
//                (q/k/v fused into one matrix, gate/up into another; tied embeddings when output.weight is absent).
//   LlamaSession one sequence: its KV cache and position. forward() takes a window of tokens as one batch (every
//                projection is a GEMM), quantizes each token's K and V row per KV head with quantize_row then
//                dequantize_row, and runs causal attention over the dequantized cache. Each row is quantized on
//                its own, so a window gives what token-by-token decoding gives (tests/test_model.cpp checks it).
//   KvCacheSpec  the K and V formats (any qdec KvFormat, or fp32 = unquantized), possibly different.
//   SmoothScales SmoothAttention (seed 001): per layer, KV head and dim, K / lambda is stored and Q * lambda
//                used, so Q.K is unchanged and only the quantization error moves.
//
// Like the rest of the library it never prints or exits: failures come back as a Status naming the value.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qdec/formats.h"
#include "qdec/gguf.h"
#include "qdec/status.h"

namespace qdec {

namespace cpu {
class ThreadPool;
enum class RopeStyle;
}  // namespace cpu

struct LlamaConfig {
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_ff = 0;
  int vocab_size = 0;
  int context_length = 0;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
};

// One side (K or V) of the cache: a qdec KV format, or fp32 (stored as computed).
struct KvSideFormat {
  bool fp32 = false;
  KvFormat format = KvFormat::bf16();
  std::string name() const { return fp32 ? "fp32" : format.name(); }
  bool operator==(const KvSideFormat&) const = default;
};

struct KvCacheSpec {
  KvSideFormat k, v;
  // "int4-g4", or "int8/int4" when K and V differ.
  std::string name() const { return k == v ? k.name() : k.name() + "/" + v.name(); }
  // "fp32", any canonical KV format name (parse_kv_format), or "KFMT/VFMT". Errors name the string.
  static Status parse(std::string_view text, KvCacheSpec* out);
  static KvCacheSpec uniform(KvSideFormat side) { return {side, side}; }
  bool operator==(const KvCacheSpec&) const = default;
};

// SmoothAttention scales, lambda[(layer * n_kv_heads + kv_head) * head_dim + dim] > 0.
struct SmoothScales {
  int n_layers = 0, n_kv_heads = 0, head_dim = 0;
  float alpha = 0.5f;
  std::vector<float> lambda;
  const float* at(int layer, int kv_head) const {
    return lambda.data() + (size_t(layer) * n_kv_heads + kv_head) * head_dim;
  }
};

struct ModelLoadOptions {
  // 0: std::thread::hardware_concurrency(). Also sets OpenBLAS's thread count, which is process-wide.
  int num_threads = 0;
  // RoPE pairing. GGUF llama files need adjacent pairs (the converter permuted q/k for ggml's normal mode);
  // kHalves exists to show that it is the wrong one for them (docs/model.md).
  bool rope_halves = false;
};

class LlamaModel {
 public:
  ~LlamaModel();
  // Reads `general.architecture` (must be llama), the llama.* hyper-parameters and every weight.
  static Status load(const GgufFile& file, const ModelLoadOptions& opts, std::unique_ptr<LlamaModel>* out);
  static Status load(const std::string& path, const ModelLoadOptions& opts, std::unique_ptr<LlamaModel>* out);

  const LlamaConfig& config() const { return cfg_; }
  cpu::RopeStyle rope_style() const;
  cpu::ThreadPool& pool() const { return *pool_; }
  int num_threads() const;
  // logits[n x vocab] = hidden[n x d_model] . E^T (output.weight, or token_embd.weight when tied).
  void logits(const float* hidden, int n, float* out) const;

  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    std::vector<float> wqkv;   // [(d_model + 2 * kv_dim) x d_model]: q rows, then k, then v
    std::vector<float> wo;     // [d_model x d_model]
    std::vector<float> wgu;    // [2 * d_ff x d_model]: gate rows, then up
    std::vector<float> wdown;  // [d_model x d_ff]
  };
  const std::vector<Layer>& layers() const { return layers_; }
  const float* embedding(int32_t token) const { return tok_embd_.data() + size_t(token) * cfg_.d_model; }
  const std::vector<float>& output_norm() const { return output_norm_; }

 private:
  LlamaModel() = default;
  LlamaConfig cfg_;
  bool rope_halves_ = false;
  std::vector<Layer> layers_;
  std::vector<float> tok_embd_;     // [vocab x d_model]
  std::vector<float> output_;       // [vocab x d_model]; empty when tied
  std::vector<float> output_norm_;  // [d_model]
  std::unique_ptr<cpu::ThreadPool> pool_;
};

struct SessionOptions {
  KvCacheSpec kv = KvCacheSpec::uniform({});  // bf16 K and V
  const SmoothScales* smooth = nullptr;       // SmoothAttention scales, or none (must outlive the session)
  int max_tokens = 0;                         // cache capacity; 0: the model's context_length
};

class LlamaSession {
 public:
  LlamaSession() = default;
  // Validates the formats against head_dim, the smooth scales' shape and max_tokens; allocates the cache.
  Status init(const LlamaModel* model, const SessionOptions& opts);

  // Run `n` tokens at positions pos() .. pos()+n-1 as one batch, appending their K/V to the cache. With
  // hidden_out, writes the final-RMSNorm'ed hidden states [n x d_model]. InvalidArgument names a token id
  // outside the vocabulary or a window that would pass max_tokens.
  Status forward(const int32_t* tokens, int n, float* hidden_out);
  // forward() of the tokens, then the logits of the last one into logits_out[vocab].
  Status forward_last_logits(const int32_t* tokens, int n, float* logits_out);
  int pos() const { return pos_; }
  void reset() { pos_ = 0; }
  const SessionOptions& options() const { return opts_; }

  // Calibration hook: when set, forward() folds max |K| after RoPE (before any smoothing) into
  // (*absmax)[(layer * n_kv_heads + kv_head) * head_dim + dim]; the vector is sized by the call.
  void set_k_absmax_observer(std::vector<float>* absmax) { k_absmax_ = absmax; }

 private:
  void store_kv(int layer, int n, const float* qkv);
  void attention(int layer, int n, const float* qkv, float* out);

  const LlamaModel* model_ = nullptr;
  SessionOptions opts_;
  int max_tokens_ = 0;
  int pos_ = 0;
  // Per layer: [n_kv_heads][max_tokens][head_dim] floats, the dequantized rows.
  std::vector<std::vector<float>> k_cache_, v_cache_;
  std::vector<float> rope_cs_;  // [max_tokens][head_dim] (cos, sin) pairs
  std::vector<float>* k_absmax_ = nullptr;
  // Scratch, sized for the largest window seen.
  std::vector<float> x_, h_, qkv_, att_, tmp_, gu_, act_, scores_;
};

// SmoothAttention calibration: lambda_i = max(max|K_i|, max|K_j|)^alpha with j the dim RoPE rotates with i
// ((2i, 2i+1) for GGUF llama), from an absmax gathered with LlamaSession::set_k_absmax_observer. A dim whose
// max is 0 gets lambda 1.
Status smooth_scales_from_absmax(const LlamaConfig& cfg, cpu::RopeStyle style, const std::vector<float>& absmax,
                                 float alpha, SmoothScales* out);
// JSON: {"alpha":..,"n_layers":..,"n_kv_heads":..,"head_dim":..,"rope_pairs":"adjacent","lambda":[...]}.
std::string smooth_scales_to_json(const SmoothScales& s, cpu::RopeStyle style);
Status smooth_scales_from_json(std::string_view json, SmoothScales* out);

// ---- sampling -------------------------------------------------------------------------------------------
struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus: keep the most likely tokens whose probability sums to >= top_p
  uint64_t seed = 0;
};
Status validate_sampler_options(const SamplerOptions& opts);
// Index of the largest logit (the first on ties).
int32_t argmax(const float* logits, int n);
// The distribution the sampler draws from: tokens in decreasing probability, renormalized after the top-p cut
// (the smallest prefix whose probability reaches top_p; at least one token). temperature must be > 0.
std::vector<std::pair<int32_t, float>> sampling_distribution(const float* logits, int n, float temperature,
                                                             float top_p);
class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opts) : opts_(opts), rng_(opts.seed) {}
  int32_t sample(const float* logits, int n);

 private:
  SamplerOptions opts_;
  std::mt19937_64 rng_;
};

// ---- chat template --------------------------------------------------------------------------------------
struct ChatMessage {
  std::string role, content;
};
// Renders `messages` with the file's `tokenizer.chat_template`. Only the ChatML family is implemented
// (<|im_start|>role\ncontent<|im_end|>\n, then <|im_start|>assistant\n when add_generation_prompt); a default
// system message the template inserts when the first message is not a system one (SmolLM2 does) is taken from
// the template text. Any other template is Unsupported, naming its start; a file without one InvalidArgument.
Status apply_chat_template(const GgufFile& file, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           std::string* out);

}  // namespace qdec
