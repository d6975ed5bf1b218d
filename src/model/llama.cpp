// Llama-family reference forward on the CPU (qdec/model.h; docs/model.md, "Reference forward").
//
// Shapes (n = tokens in the window, d = d_model, kvd = n_kv_heads * head_dim):
//   x [n x d] residual stream; h [n x d] normed; qkv [n x (d + 2 kvd)]; att [n x d]; gu [n x 2 d_ff]
//   K/V cache per layer: [n_kv_heads][max_tokens][head_dim] floats holding the *dequantized* rows.
// Every projection is one GEMM over the window. Each token's K and V rows (one per KV head) go through
// quantize_row + dequantize_row on their own, and attention then reads only the cache, so a window computes
// what token-by-token decoding computes. Attention runs per KV head over blocks of query rows: the group's
// query heads are stacked as rows (GQA), S = Q K^T over the keys the block can see, a causal mask and a
// softmax per row, then O = P V -- two GEMMs per block.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/cpu_ops.h"
#include "qdec/model.h"

namespace qdec {

namespace {

Status get_count(const GgufFile& f, std::string_view key, int* out, bool required = true) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (!required) return Status::Ok();
    return Status(StatusCode::kInvalidArgument, "GGUF metadata key '" + std::string(key) + "' is missing");
  }
  int64_t x = -1;
  if (v->type == GgufValueType::kUint32) {
    uint32_t u;
    QDEC_RETURN_IF_ERROR(GgufFile::value_as(*v, &u));
    x = u;
  } else if (v->type == GgufValueType::kInt32) {
    int32_t i;
    QDEC_RETURN_IF_ERROR(GgufFile::value_as(*v, &i));
    x = i;
  } else if (v->type == GgufValueType::kUint64) {
    uint64_t u;
    QDEC_RETURN_IF_ERROR(GgufFile::value_as(*v, &u));
    x = u > (1ull << 30) ? -1 : int64_t(u);
  } else {
    return Status(StatusCode::kInvalidArgument, "GGUF metadata key '" + std::string(key) + "' holds " +
                                                    gguf_value_type_name(v->type) + ", expected an integer");
  }
  if (x <= 0 || x > (1 << 30)) {
    return Status(StatusCode::kInvalidArgument,
                  "GGUF metadata key '" + std::string(key) + "' = " + std::to_string(x) + " is out of range");
  }
  *out = int(x);
  return Status::Ok();
}

Status get_float(const GgufFile& f, std::string_view key, float* out) {
  if (f.find(key) == nullptr) return Status::Ok();  // keep the default
  return f.get(key, out);
}

// Dequantizes tensor `name`, which must have dims {cols, rows} (ggml order), into dst[rows x cols].
Status load_matrix(const GgufFile& f, const std::string& name, uint64_t cols, uint64_t rows, float* dst) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return Status(StatusCode::kInvalidArgument, "tensor '" + name + "' is missing");
  const bool ok = rows == 1 ? (t->dims.size() == 1 && t->dims[0] == cols)
                            : (t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows);
  if (!ok) {
    std::string dims;
    for (uint64_t d : t->dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    return Status(StatusCode::kInvalidArgument, "tensor '" + name + "' has dims [" + dims + "], expected [" +
                                                    std::to_string(cols) +
                                                    (rows == 1 ? "" : ", " + std::to_string(rows)) + "]");
  }
  return f.dequantize(*t, dst);
}

}  // namespace

// ---- KvCacheSpec ------------------------------------------------------------------------------------------
Status KvCacheSpec::parse(std::string_view text, KvCacheSpec* out) {
  auto side = [](std::string_view s, KvSideFormat* o) -> Status {
    if (s == "fp32") {
      *o = KvSideFormat{true, KvFormat::bf16()};
      return Status::Ok();
    }
    KvFormat f;
    Status st = parse_kv_format(s, &f);
    if (!st.ok()) return Status(st.code(), st.message() + " (or fp32)");
    *o = KvSideFormat{false, f};
    return Status::Ok();
  };
  KvCacheSpec spec;
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    QDEC_RETURN_IF_ERROR(side(text, &spec.k));
    spec.v = spec.k;
  } else {
    QDEC_RETURN_IF_ERROR(side(text.substr(0, slash), &spec.k));
    QDEC_RETURN_IF_ERROR(side(text.substr(slash + 1), &spec.v));
  }
  *out = spec;
  return Status::Ok();
}

// ---- LlamaModel -------------------------------------------------------------------------------------------
LlamaModel::~LlamaModel() = default;

cpu::RopeStyle LlamaModel::rope_style() const {
  return rope_halves_ ? cpu::RopeStyle::kHalves : cpu::RopeStyle::kAdjacent;
}
int LlamaModel::num_threads() const {
  return pool_->size();
}

Status LlamaModel::load(const std::string& path, const ModelLoadOptions& opts, std::unique_ptr<LlamaModel>* out) {
  GgufFile f;
  QDEC_RETURN_IF_ERROR(GgufFile::open(path, &f));
  return load(f, opts, out);
}

Status LlamaModel::load(const GgufFile& f, const ModelLoadOptions& opts, std::unique_ptr<LlamaModel>* out) {
  std::string arch;
  QDEC_RETURN_IF_ERROR(f.get("general.architecture", &arch));
  if (arch != "llama") {
    return Status(StatusCode::kUnsupported, "general.architecture '" + arch + "' is not supported (only llama)");
  }
  if (opts.num_threads < 0) {
    return Status(StatusCode::kInvalidArgument, "num_threads " + std::to_string(opts.num_threads) + " is negative");
  }
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  LlamaConfig& c = m->cfg_;
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.block_count", &c.n_layers));
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.embedding_length", &c.d_model));
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.attention.head_count", &c.n_heads));
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.feed_forward_length", &c.d_ff));
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.context_length", &c.context_length));
  c.n_kv_heads = c.n_heads;
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.attention.head_count_kv", &c.n_kv_heads, /*required=*/false));
  QDEC_RETURN_IF_ERROR(get_float(f, "llama.rope.freq_base", &c.rope_theta));
  QDEC_RETURN_IF_ERROR(get_float(f, "llama.attention.layer_norm_rms_epsilon", &c.rms_eps));
  if (c.d_model % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0) {
    return Status(StatusCode::kInvalidArgument, "embedding_length " + std::to_string(c.d_model) + ", head_count " +
                                                    std::to_string(c.n_heads) + " and head_count_kv " +
                                                    std::to_string(c.n_kv_heads) + " do not divide");
  }
  c.head_dim = c.d_model / c.n_heads;
  if (c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim) {
    return Status(StatusCode::kUnsupported, "head_dim " + std::to_string(c.head_dim) + " is not supported");
  }
  int rope_dims = c.head_dim;
  QDEC_RETURN_IF_ERROR(get_count(f, "llama.rope.dimension_count", &rope_dims, /*required=*/false));
  if (rope_dims != c.head_dim) {
    return Status(StatusCode::kUnsupported, "llama.rope.dimension_count " + std::to_string(rope_dims) +
                                                " != head_dim " + std::to_string(c.head_dim) +
                                                " (partial RoPE is not supported)");
  }
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  if (emb == nullptr || emb->dims.size() != 2 || emb->dims[0] != uint64_t(c.d_model) || emb->dims[1] > (1u << 24)) {
    return Status(StatusCode::kInvalidArgument, "tensor 'token_embd.weight' is missing or not [d_model, vocab]");
  }
  c.vocab_size = int(emb->dims[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  m->rope_halves_ = opts.rope_halves;

  const int threads = opts.num_threads > 0 ? opts.num_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  m->pool_ = std::make_unique<cpu::ThreadPool>(threads);
  cpu::set_gemm_threads(threads);

  const size_t d = size_t(c.d_model), kvd = size_t(c.n_kv_heads) * c.head_dim, ff = size_t(c.d_ff);
  m->tok_embd_.resize(size_t(c.vocab_size) * d);
  m->output_norm_.resize(d);
  if (!c.tied_embeddings) m->output_.resize(size_t(c.vocab_size) * d);
  m->layers_.resize(size_t(c.n_layers));

  // Every tensor to load, dequantized in parallel.
  struct Job {
    std::string name;
    uint64_t cols, rows;
    float* dst;
  };
  std::vector<Job> jobs;
  jobs.push_back({"token_embd.weight", d, uint64_t(c.vocab_size), m->tok_embd_.data()});
  jobs.push_back({"output_norm.weight", d, 1, m->output_norm_.data()});
  if (!c.tied_embeddings) jobs.push_back({"output.weight", d, uint64_t(c.vocab_size), m->output_.data()});
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& L = m->layers_[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    L.attn_norm.resize(d);
    L.ffn_norm.resize(d);
    L.wqkv.resize((d + 2 * kvd) * d);
    L.wo.resize(d * d);
    L.wgu.resize(2 * ff * d);
    L.wdown.resize(d * ff);
    jobs.push_back({p + "attn_norm.weight", d, 1, L.attn_norm.data()});
    jobs.push_back({p + "ffn_norm.weight", d, 1, L.ffn_norm.data()});
    jobs.push_back({p + "attn_q.weight", d, d, L.wqkv.data()});
    jobs.push_back({p + "attn_k.weight", d, kvd, L.wqkv.data() + d * d});
    jobs.push_back({p + "attn_v.weight", d, kvd, L.wqkv.data() + (d + kvd) * d});
    jobs.push_back({p + "attn_output.weight", d, d, L.wo.data()});
    jobs.push_back({p + "ffn_gate.weight", d, ff, L.wgu.data()});
    jobs.push_back({p + "ffn_up.weight", d, ff, L.wgu.data() + ff * d});
    jobs.push_back({p + "ffn_down.weight", ff, d, L.wdown.data()});
  }
  std::vector<Status> results(jobs.size());
  m->pool_->parallel_for(int64_t(jobs.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      results[size_t(i)] =
          load_matrix(f, jobs[size_t(i)].name, jobs[size_t(i)].cols, jobs[size_t(i)].rows, jobs[size_t(i)].dst);
    }
  });
  for (const Status& s : results) QDEC_RETURN_IF_ERROR(s);
  *out = std::move(m);
  return Status::Ok();
}

void LlamaModel::logits(const float* hidden, int n, float* out) const {
  const float* e = cfg_.tied_embeddings ? tok_embd_.data() : output_.data();
  cpu::sgemm(*pool_, true, n, cfg_.vocab_size, cfg_.d_model, hidden, cfg_.d_model, e, cfg_.d_model, out,
             cfg_.vocab_size);
}

// ---- LlamaSession -----------------------------------------------------------------------------------------
Status LlamaSession::init(const LlamaModel* model, const SessionOptions& opts) {
  if (model == nullptr) return Status(StatusCode::kInvalidArgument, "model is null");
  const LlamaConfig& c = model->config();
  for (const KvSideFormat* s : {&opts.kv.k, &opts.kv.v}) {
    if (!s->fp32) QDEC_RETURN_IF_ERROR(validate_kv_format(s->format, c.head_dim));
  }
  if (opts.smooth != nullptr) {
    const SmoothScales& sm = *opts.smooth;
    if (sm.n_layers != c.n_layers || sm.n_kv_heads != c.n_kv_heads || sm.head_dim != c.head_dim ||
        sm.lambda.size() != size_t(c.n_layers) * c.n_kv_heads * c.head_dim) {
      return Status(StatusCode::kInvalidArgument,
                    "smooth scales are for " + std::to_string(sm.n_layers) + " layers x " +
                        std::to_string(sm.n_kv_heads) + " KV heads x " + std::to_string(sm.head_dim) +
                        " dims; the model has " + std::to_string(c.n_layers) + " x " + std::to_string(c.n_kv_heads) +
                        " x " + std::to_string(c.head_dim));
    }
    for (float l : sm.lambda) {
      if (!(l > 0.0f) || !std::isfinite(l)) {
        return Status(StatusCode::kInvalidArgument, "smooth scale " + std::to_string(l) + " is not positive");
      }
    }
  }
  if (opts.max_tokens < 0) {
    return Status(StatusCode::kInvalidArgument, "max_tokens " + std::to_string(opts.max_tokens) + " is negative");
  }
  model_ = model;
  opts_ = opts;
  max_tokens_ = opts.max_tokens > 0 ? opts.max_tokens : c.context_length;
  pos_ = 0;
  const size_t per_layer = size_t(c.n_kv_heads) * max_tokens_ * c.head_dim;
  k_cache_.assign(size_t(c.n_layers), std::vector<float>(per_layer, 0.0f));
  v_cache_.assign(size_t(c.n_layers), std::vector<float>(per_layer, 0.0f));
  rope_cs_.resize(size_t(max_tokens_) * c.head_dim);
  for (int p = 0; p < max_tokens_; ++p) cpu::rope_table(c.head_dim, c.rope_theta, p, &rope_cs_[size_t(p) * c.head_dim]);
  return Status::Ok();
}

// RoPE on q and k (in place in qkv), the calibration observer, SmoothAttention, then each K and V row through
// the cache format into the cache.
void LlamaSession::store_kv(int layer, int n, const float* qkv_const) {
  const LlamaConfig& c = model_->config();
  const int hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, group = nh / nkv;
  const int kvd = nkv * hd, qkv_w = c.d_model + 2 * kvd;
  float* qkv = const_cast<float*>(qkv_const);
  const cpu::RopeStyle style = model_->rope_style();
  model_->pool().parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = qkv + size_t(t) * qkv_w;
      const float* cs = &rope_cs_[size_t(pos_ + t) * hd];
      for (int h = 0; h < nh + nkv; ++h) cpu::rope_apply(style, hd, cs, row + size_t(h) * hd);
    }
  });
  if (k_absmax_ != nullptr) {
    k_absmax_->resize(size_t(c.n_layers) * kvd, 0.0f);
    float* mx = k_absmax_->data() + size_t(layer) * kvd;
    for (int t = 0; t < n; ++t) {
      const float* k = qkv + size_t(t) * qkv_w + c.d_model;
      for (int i = 0; i < kvd; ++i) mx[i] = std::max(mx[i], std::fabs(k[i]));
    }
  }
  const SmoothScales* sm = opts_.smooth;
  auto put = [&](const KvSideFormat& fmt, const float* src, float* dst) {
    if (fmt.fp32) {
      std::memcpy(dst, src, sizeof(float) * size_t(hd));
      return;
    }
    QuantizedRow q;
    quantize_row(fmt.format, hd, src, &q);
    dequantize_row(fmt.format, hd, q, dst);
  };
  model_->pool().parallel_for(n, [&](int64_t t0, int64_t t1) {
    float tmp[kMaxHeadDim];
    for (int64_t t = t0; t < t1; ++t) {
      float* row = qkv + size_t(t) * qkv_w;
      const size_t p = size_t(pos_ + t);
      for (int g = 0; g < nkv; ++g) {
        const float* k = row + c.d_model + size_t(g) * hd;
        const float* v = row + c.d_model + kvd + size_t(g) * hd;
        float* kc = k_cache_[size_t(layer)].data() + (size_t(g) * max_tokens_ + p) * hd;
        float* vc = v_cache_[size_t(layer)].data() + (size_t(g) * max_tokens_ + p) * hd;
        if (sm != nullptr) {
          const float* lam = sm->at(layer, g);
          for (int i = 0; i < hd; ++i) tmp[i] = k[i] / lam[i];
          put(opts_.kv.k, tmp, kc);
          for (int j = 0; j < group; ++j) {
            float* q = row + size_t(g * group + j) * hd;
            for (int i = 0; i < hd; ++i) q[i] *= lam[i];
          }
        } else {
          put(opts_.kv.k, k, kc);
        }
        put(opts_.kv.v, v, vc);
      }
    }
  });
}

void LlamaSession::attention(int layer, int n, const float* qkv, float* out) {
  const LlamaConfig& c = model_->config();
  const int hd = c.head_dim, nkv = c.n_kv_heads, group = c.n_heads / nkv;
  const int qkv_w = c.d_model + 2 * nkv * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  constexpr int kQueryBlock = 128;  // query tokens per block: a block sees keys [0, pos + block end)
  cpu::ThreadPool& pool = model_->pool();
  std::vector<float> qg, og;
  for (int g = 0; g < nkv; ++g) {
    const float* kc = k_cache_[size_t(layer)].data() + size_t(g) * max_tokens_ * hd;
    const float* vc = v_cache_[size_t(layer)].data() + size_t(g) * max_tokens_ * hd;
    for (int r0 = 0; r0 < n; r0 += kQueryBlock) {
      const int rows = std::min(n, r0 + kQueryBlock) - r0;
      const int L = pos_ + r0 + rows;  // keys visible to the block's last row
      const int M = rows * group;      // row i: token r0 + i / group, query head g * group + i % group
      qg.resize(size_t(M) * hd);
      og.resize(size_t(M) * hd);
      for (int i = 0; i < M; ++i) {
        std::memcpy(&qg[size_t(i) * hd], qkv + size_t(r0 + i / group) * qkv_w + size_t(g * group + i % group) * hd,
                    sizeof(float) * size_t(hd));
      }
      scores_.resize(size_t(M) * L);
      cpu::sgemm(pool, true, M, L, hd, qg.data(), hd, kc, hd, scores_.data(), L);
      pool.parallel_for(M, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          float* s = &scores_[size_t(i) * L];
          const int visible = pos_ + r0 + int(i / group) + 1;
          for (int j = 0; j < visible; ++j) s[j] *= scale;
          cpu::softmax_inplace(s, visible);
          std::fill(s + visible, s + L, 0.0f);
        }
      });
      cpu::sgemm(pool, false, M, hd, L, scores_.data(), L, vc, hd, og.data(), hd);
      for (int i = 0; i < M; ++i) {
        std::memcpy(out + size_t(r0 + i / group) * c.d_model + size_t(g * group + i % group) * hd, &og[size_t(i) * hd],
                    sizeof(float) * size_t(hd));
      }
    }
  }
}

Status LlamaSession::forward(const int32_t* tokens, int n, float* hidden_out) {
  if (model_ == nullptr) return Status(StatusCode::kInvalidArgument, "session is not initialized");
  const LlamaConfig& c = model_->config();
  if (n <= 0) return Status(StatusCode::kInvalidArgument, "window of " + std::to_string(n) + " tokens");
  if (pos_ + n > max_tokens_) {
    return Status(StatusCode::kInvalidArgument, "position " + std::to_string(pos_) + " + " + std::to_string(n) +
                                                    " tokens exceeds max_tokens " + std::to_string(max_tokens_));
  }
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) {
      return Status(StatusCode::kInvalidArgument, "token id " + std::to_string(tokens[t]) + " at " + std::to_string(t) +
                                                      " is outside [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  const int d = c.d_model, kvd = c.n_kv_heads * c.head_dim, qkv_w = d + 2 * kvd, ff = c.d_ff;
  cpu::ThreadPool& pool = model_->pool();
  x_.resize(size_t(n) * d);
  h_.resize(size_t(n) * d);
  qkv_.resize(size_t(n) * qkv_w);
  att_.resize(size_t(n) * d);
  tmp_.resize(size_t(n) * d);
  gu_.resize(size_t(n) * 2 * ff);
  act_.resize(size_t(n) * ff);
  for (int t = 0; t < n; ++t) std::memcpy(&x_[size_t(t) * d], model_->embedding(tokens[t]), sizeof(float) * d);

  auto norm_rows = [&](const std::vector<float>& w) {
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) cpu::rms_norm(&x_[size_t(t) * d], w.data(), d, c.rms_eps, &h_[size_t(t) * d]);
    });
  };
  auto add_rows = [&] {
    pool.parallel_for(int64_t(n) * d, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x_[size_t(i)] += tmp_[size_t(i)];
    });
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaModel::Layer& L = model_->layers()[size_t(l)];
    norm_rows(L.attn_norm);
    cpu::sgemm(pool, true, n, qkv_w, d, h_.data(), d, L.wqkv.data(), d, qkv_.data(), qkv_w);
    store_kv(l, n, qkv_.data());
    attention(l, n, qkv_.data(), att_.data());
    cpu::sgemm(pool, true, n, d, d, att_.data(), d, L.wo.data(), d, tmp_.data(), d);
    add_rows();
    norm_rows(L.ffn_norm);
    cpu::sgemm(pool, true, n, 2 * ff, d, h_.data(), d, L.wgu.data(), d, gu_.data(), 2 * ff);
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* g = &gu_[size_t(t) * 2 * ff];
        cpu::swiglu(g, g + ff, ff, &act_[size_t(t) * ff]);
      }
    });
    cpu::sgemm(pool, true, n, d, ff, act_.data(), ff, L.wdown.data(), ff, tmp_.data(), d);
    add_rows();
  }
  pos_ += n;
  if (hidden_out != nullptr) {
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        cpu::rms_norm(&x_[size_t(t) * d], model_->output_norm().data(), d, c.rms_eps, hidden_out + size_t(t) * d);
      }
    });
  }
  return Status::Ok();
}

Status LlamaSession::forward_last_logits(const int32_t* tokens, int n, float* logits_out) {
  if (model_ == nullptr) return Status(StatusCode::kInvalidArgument, "session is not initialized");
  std::vector<float> hidden(size_t(std::max(n, 1)) * model_->config().d_model);
  QDEC_RETURN_IF_ERROR(forward(tokens, n, hidden.data()));
  model_->logits(hidden.data() + size_t(n - 1) * model_->config().d_model, 1, logits_out);
  return Status::Ok();
}

// ---- SmoothAttention scales -------------------------------------------------------------------------------
Status smooth_scales_from_absmax(const LlamaConfig& cfg, cpu::RopeStyle style, const std::vector<float>& absmax,
                                 float alpha, SmoothScales* out) {
  const size_t n = size_t(cfg.n_layers) * cfg.n_kv_heads * cfg.head_dim;
  if (absmax.size() != n) {
    return Status(StatusCode::kInvalidArgument,
                  "absmax holds " + std::to_string(absmax.size()) + " values, expected " + std::to_string(n));
  }
  if (!(alpha >= 0.0f && alpha <= 1.0f)) {
    return Status(StatusCode::kInvalidArgument, "alpha " + std::to_string(alpha) + " is outside [0, 1]");
  }
  SmoothScales s;
  s.n_layers = cfg.n_layers;
  s.n_kv_heads = cfg.n_kv_heads;
  s.head_dim = cfg.head_dim;
  s.alpha = alpha;
  s.lambda.resize(n);
  const int hd = cfg.head_dim;
  for (size_t row = 0; row < n / size_t(hd); ++row) {
    for (int i = 0; i < hd; ++i) {
      const float m =
          std::max(absmax[row * hd + size_t(i)], absmax[row * hd + size_t(cpu::rope_partner(style, hd, i))]);
      s.lambda[row * hd + size_t(i)] = m > 0.0f && std::isfinite(m) ? std::pow(m, alpha) : 1.0f;
    }
  }
  *out = std::move(s);
  return Status::Ok();
}

std::string smooth_scales_to_json(const SmoothScales& s, cpu::RopeStyle style) {
  nlohmann::json j;
  j["alpha"] = s.alpha;
  j["n_layers"] = s.n_layers;
  j["n_kv_heads"] = s.n_kv_heads;
  j["head_dim"] = s.head_dim;
  j["rope_pairs"] = cpu::rope_style_name(style);
  j["lambda"] = s.lambda;
  return j.dump();
}

Status smooth_scales_from_json(std::string_view text, SmoothScales* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status(StatusCode::kInvalidArgument, "smooth scales: not a JSON object");
  }
  SmoothScales s;
  for (const char* key : {"n_layers", "n_kv_heads", "head_dim", "lambda"}) {
    if (!j.contains(key)) return Status(StatusCode::kInvalidArgument, std::string("smooth scales: no '") + key + "'");
  }
  if (!j["n_layers"].is_number_integer() || !j["n_kv_heads"].is_number_integer() ||
      !j["head_dim"].is_number_integer() || !j["lambda"].is_array()) {
    return Status(StatusCode::kInvalidArgument, "smooth scales: wrong value types");
  }
  s.n_layers = j["n_layers"].get<int>();
  s.n_kv_heads = j["n_kv_heads"].get<int>();
  s.head_dim = j["head_dim"].get<int>();
  if (j.contains("alpha") && j["alpha"].is_number()) s.alpha = j["alpha"].get<float>();
  for (const auto& v : j["lambda"]) {
    if (!v.is_number()) return Status(StatusCode::kInvalidArgument, "smooth scales: a lambda is not a number");
    s.lambda.push_back(v.get<float>());
  }
  if (s.n_layers <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 ||
      s.lambda.size() != size_t(s.n_layers) * s.n_kv_heads * s.head_dim) {
    return Status(StatusCode::kInvalidArgument, "smooth scales: " + std::to_string(s.lambda.size()) + " lambdas for " +
                                                    std::to_string(s.n_layers) + " x " + std::to_string(s.n_kv_heads) +
                                                    " x " + std::to_string(s.head_dim));
  }
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace qdec
