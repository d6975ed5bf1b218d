// The CPU reference forward (qdec/model.h, src/model/cpu_ops.h): pieces against hand-computed values, the GEMMs
// against double, a tiny synthetic GGUF model against a naive double-precision forward, window-vs-decode
// equivalence, SmoothAttention exactness, the sampler, the chat template, golden greedy tokens of SmolLM2
// (skipped without the model), and usage errors of the `qdec` CLI.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attention/decode_timeline.h"
#include "gemm/fused_timeline.h"
#include "model/cpu_ops.h"
#include "qdec/model.h"
#include "qdec/tokenizer.h"
#include "test_util.h"

namespace qdec {
namespace {

// ---- pieces ------------------------------------------------------------------------------------------------
TEST(CpuOps, RmsNorm) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f};
  float out[4];
  cpu::rms_norm(x, w, 4, 0.0f, out);
  const double r = std::sqrt(30.0 / 4.0);  // mean of squares 7.5
  const double want[4] = {1 / r, 2 / r, 6 / r, 2 / r};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
  cpu::rms_norm(x, w, 4, 2.5f, out);  // eps adds to the mean: sqrt(10)
  EXPECT_NEAR(out[0], 1 / std::sqrt(10.0), 1e-6);
}

TEST(CpuOps, RopeAdjacentAndHalves) {
  // head_dim 4, theta 10000, position 1: pair 0 turns by 1 rad, pair 1 by 10000^-0.5 = 0.01 rad.
  float cs[4];
  cpu::rope_table(4, 10000.0f, 1, cs);
  EXPECT_NEAR(cs[0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(cs[1], std::sin(1.0), 1e-7);
  EXPECT_NEAR(cs[2], std::cos(0.01), 1e-7);
  EXPECT_NEAR(cs[3], std::sin(0.01), 1e-7);
  // Adjacent pairs (0,1), (2,3).
  float a[4] = {1, 0, 0, 1};
  cpu::rope_apply(cpu::RopeStyle::kAdjacent, 4, cs, a);
  const double wa[4] = {std::cos(1.0), std::sin(1.0), -std::sin(0.01), std::cos(0.01)};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a[i], wa[i], 1e-6) << i;
  // Halves: pairs (0,2), (1,3).
  float h[4] = {1, 0, 0, 1};
  cpu::rope_apply(cpu::RopeStyle::kHalves, 4, cs, h);
  const double wh[4] = {std::cos(1.0), -std::sin(0.01), std::sin(1.0), std::cos(0.01)};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i], wh[i], 1e-6) << i;
  // Position 0 is the identity; partners.
  cpu::rope_table(4, 10000.0f, 0, cs);
  float z[4] = {0.5f, -2, 3, 7};
  cpu::rope_apply(cpu::RopeStyle::kAdjacent, 4, cs, z);
  EXPECT_EQ(z[1], -2.0f);
  EXPECT_EQ(cpu::rope_partner(cpu::RopeStyle::kAdjacent, 64, 6), 7);
  EXPECT_EQ(cpu::rope_partner(cpu::RopeStyle::kAdjacent, 64, 7), 6);
  EXPECT_EQ(cpu::rope_partner(cpu::RopeStyle::kHalves, 64, 6), 38);
  EXPECT_EQ(cpu::rope_partner(cpu::RopeStyle::kHalves, 64, 38), 6);
}

TEST(CpuOps, SwiGLU) {
  const float g[3] = {0, 1, -2}, u[3] = {3, 2, 1};
  float out[3];
  cpu::swiglu(g, u, 3, out);
  EXPECT_NEAR(out[0], 0.0, 1e-7);
  EXPECT_NEAR(out[1], 2 * 0.7310585786, 1e-6);  // silu(1) = 1 / (1 + e^-1)
  EXPECT_NEAR(out[2], -0.2384058440, 1e-6);     // silu(-2) = -2 / (1 + e^2)
}

TEST(CpuOps, Softmax) {
  float x[3] = {0, std::log(2.0f), std::log(3.0f)};
  const double lse = cpu::softmax_inplace(x, 3);
  EXPECT_NEAR(x[0], 1.0 / 6, 1e-7);
  EXPECT_NEAR(x[1], 2.0 / 6, 1e-7);
  EXPECT_NEAR(x[2], 3.0 / 6, 1e-7);
  EXPECT_NEAR(lse, std::log(6.0), 1e-6);
  float big[2] = {1000, 1000};  // no overflow
  cpu::softmax_inplace(big, 2);
  EXPECT_NEAR(big[0], 0.5, 1e-7);
}

TEST(CpuOps, GemmMatchesDouble) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> nd;
  cpu::ThreadPool pool(2);
  for (auto [M, N, K] :
       std::vector<std::array<int, 3>>{{1, 1, 1}, {3, 5, 7}, {1, 193, 64}, {17, 36, 129}, {64, 100, 576}}) {
    for (bool trans_b : {true, false}) {
      std::vector<float> A(size_t(M) * K), B(size_t(N) * K), C(size_t(M) * N, NAN), C2(size_t(M) * N, NAN);
      for (float& v : A) v = nd(rng);
      for (float& v : B) v = nd(rng);
      std::vector<double> want(size_t(M) * N), got(size_t(M) * N), got2(size_t(M) * N);
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          double s = 0;
          for (int k = 0; k < K; ++k)
            s += double(A[size_t(m) * K + k]) * (trans_b ? B[size_t(n) * K + k] : B[size_t(k) * N + n]);
          want[size_t(m) * N + n] = s;
        }
      }
      cpu::sgemm(pool, trans_b, M, N, K, A.data(), K, B.data(), trans_b ? K : N, C.data(), N);
      cpu::sgemm_builtin(pool, trans_b, M, N, K, A.data(), K, B.data(), trans_b ? K : N, C2.data(), N);
      for (size_t i = 0; i < C.size(); ++i) {
        got[i] = C[i];
        got2[i] = C2[i];
      }
      SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " K " << K << " trans_b " << trans_b);
      EXPECT_LT(rel_l2(got.data(), want.data(), want.size()), 1e-5) << cpu::gemm_backend_name();
      EXPECT_LT(rel_l2(got2.data(), want.data(), want.size()), 1e-5) << "builtin";
    }
  }
}

TEST(CpuOps, ThreadPoolCoversRange) {
  cpu::ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 1000}) {
    std::vector<int> hits(size_t(n), 0);
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
        },
        4);
    EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n);
  }
}

// ---- a tiny synthetic llama GGUF ---------------------------------------------------------------------------
struct GgufWriter {
  std::vector<uint8_t> kv;
  uint64_t num_kv = 0;
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    std::vector<float> data;
  };
  std::vector<Tensor> tensors;

  template <typename T>
  static void put(std::vector<uint8_t>& b, T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    b.insert(b.end(), raw, raw + sizeof(T));
  }
  static void str(std::vector<uint8_t>& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void u32(const std::string& k, uint32_t v) {
    str(kv, k);
    put<uint32_t>(kv, uint32_t(GgufValueType::kUint32));
    put<uint32_t>(kv, v);
    ++num_kv;
  }
  void f32(const std::string& k, float v) {
    str(kv, k);
    put<uint32_t>(kv, uint32_t(GgufValueType::kFloat32));
    put<float>(kv, v);
    ++num_kv;
  }
  void string(const std::string& k, const std::string& v) {
    str(kv, k);
    put<uint32_t>(kv, uint32_t(GgufValueType::kString));
    str(kv, v);
    ++num_kv;
  }
  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, GgufFile::kMagic);
    put<uint32_t>(out, 3);
    put<uint64_t>(out, tensors.size());
    put<uint64_t>(out, num_kv);
    out.insert(out.end(), kv.begin(), kv.end());
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const Tensor& t : tensors) {
      offs.push_back(off);
      off += (t.data.size() * 4 + 31) / 32 * 32;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      str(out, tensors[i].name);
      put<uint32_t>(out, uint32_t(tensors[i].dims.size()));
      for (uint64_t d : tensors[i].dims) put<uint64_t>(out, d);
      put<uint32_t>(out, uint32_t(GgmlType::kF32));
      put<uint64_t>(out, offs[i]);
    }
    while (out.size() % 32 != 0) out.push_back(0);
    const size_t start = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.resize(start + offs[i], 0);
      const auto* p = reinterpret_cast<const uint8_t*>(tensors[i].data.data());
      out.insert(out.end(), p, p + tensors[i].data.size() * 4);
    }
    return out;
  }
};

struct TinyModel {
  static constexpr int kLayers = 2, kD = 16, kHeads = 4, kKvHeads = 2, kHd = 4, kFf = 24, kVocab = 11, kCtx = 32;
  std::map<std::string, std::vector<float>> w;
  std::vector<uint8_t> bytes;
  GgufFile file;

  explicit TinyModel(std::mt19937_64& rng, const std::string& chat_template = "") {
    std::normal_distribution<float> nd(0.0f, 0.5f);
    GgufWriter g;
    g.string("general.architecture", "llama");
    g.u32("llama.block_count", kLayers);
    g.u32("llama.embedding_length", kD);
    g.u32("llama.attention.head_count", kHeads);
    g.u32("llama.attention.head_count_kv", kKvHeads);
    g.u32("llama.feed_forward_length", kFf);
    g.u32("llama.context_length", kCtx);
    g.f32("llama.rope.freq_base", 100.0f);
    g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (!chat_template.empty()) g.string("tokenizer.chat_template", chat_template);
    auto add = [&](const std::string& name, uint64_t cols, uint64_t rows, bool norm) {
      std::vector<float> v(cols * rows);
      for (float& x : v) x = norm ? 1.0f + 0.2f * nd(rng) : nd(rng);
      w[name] = v;
      g.tensors.push_back({name, rows == 1 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{cols, rows}, v});
    };
    add("token_embd.weight", kD, kVocab, false);
    add("output_norm.weight", kD, 1, true);
    for (int l = 0; l < kLayers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", kD, 1, true);
      add(p + "ffn_norm.weight", kD, 1, true);
      add(p + "attn_q.weight", kD, kD, false);
      add(p + "attn_k.weight", kD, kKvHeads * kHd, false);
      add(p + "attn_v.weight", kD, kKvHeads * kHd, false);
      add(p + "attn_output.weight", kD, kD, false);
      add(p + "ffn_gate.weight", kD, kFf, false);
      add(p + "ffn_up.weight", kD, kFf, false);
      add(p + "ffn_down.weight", kFf, kD, false);
    }
    bytes = g.build();
    EXPECT_TRUE(GgufFile::parse(bytes.data(), bytes.size(), &file).ok());
  }

  // y[rows] = W[rows x cols] x
  std::vector<double> matvec(const std::string& name, const std::vector<double>& x, int rows) const {
    const std::vector<float>& m = w.at(name);
    const size_t cols = x.size();
    std::vector<double> y(size_t(rows), 0.0);
    for (int r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) y[size_t(r)] += double(m[size_t(r) * cols + c]) * x[c];
    return y;
  }
  std::vector<double> rms(const std::vector<double>& x, const std::string& wname) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / double(x.size()) + 1e-5);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w.at(wname)[i];
    return y;
  }
  static void rope(double* v, int pos) {  // adjacent pairs
    for (int i = 0; i < kHd / 2; ++i) {
      const double a = pos * std::pow(100.0, -2.0 * i / kHd);
      const double x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
      v[2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  }
  // Naive double forward of the whole sequence; logits of every position.
  std::vector<std::vector<double>> forward(const std::vector<int32_t>& toks) const {
    const int T = int(toks.size()), group = kHeads / kKvHeads;
    std::vector<std::vector<double>> x(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t)
      x[size_t(t)].assign(w.at("token_embd.weight").begin() + toks[size_t(t)] * kD,
                          w.at("token_embd.weight").begin() + (toks[size_t(t)] + 1) * kD);
    for (int l = 0; l < kLayers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) {
        const auto h = rms(x[size_t(t)], p + "attn_norm.weight");
        q[size_t(t)] = matvec(p + "attn_q.weight", h, kD);
        k[size_t(t)] = matvec(p + "attn_k.weight", h, kKvHeads * kHd);
        v[size_t(t)] = matvec(p + "attn_v.weight", h, kKvHeads * kHd);
        for (int hh = 0; hh < kHeads; ++hh) rope(&q[size_t(t)][size_t(hh * kHd)], t);
        for (int hh = 0; hh < kKvHeads; ++hh) rope(&k[size_t(t)][size_t(hh * kHd)], t);
      }
      for (int t = 0; t < T; ++t) {
        std::vector<double> att(kD, 0.0);
        for (int hh = 0; hh < kHeads; ++hh) {
          const int g = hh / group;
          std::vector<double> s(size_t(t + 1));
          double mx = -1e300, sum = 0;
          for (int j = 0; j <= t; ++j) {
            double d = 0;
            for (int i = 0; i < kHd; ++i) d += q[size_t(t)][size_t(hh * kHd + i)] * k[size_t(j)][size_t(g * kHd + i)];
            s[size_t(j)] = d / std::sqrt(double(kHd));
            mx = std::max(mx, s[size_t(j)]);
          }
          for (double& e : s) sum += (e = std::exp(e - mx));
          for (int j = 0; j <= t; ++j)
            for (int i = 0; i < kHd; ++i)
              att[size_t(hh * kHd + i)] += s[size_t(j)] / sum * v[size_t(j)][size_t(g * kHd + i)];
        }
        const auto o = matvec(p + "attn_output.weight", att, kD);
        for (int i = 0; i < kD; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      }
      for (int t = 0; t < T; ++t) {
        const auto h = rms(x[size_t(t)], p + "ffn_norm.weight");
        const auto gt = matvec(p + "ffn_gate.weight", h, kFf), up = matvec(p + "ffn_up.weight", h, kFf);
        std::vector<double> a(kFf);
        for (int i = 0; i < kFf; ++i) a[size_t(i)] = gt[size_t(i)] / (1 + std::exp(-gt[size_t(i)])) * up[size_t(i)];
        const auto dn = matvec(p + "ffn_down.weight", a, kD);
        for (int i = 0; i < kD; ++i) x[size_t(t)][size_t(i)] += dn[size_t(i)];
      }
    }
    std::vector<std::vector<double>> logits(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t)
      logits[size_t(t)] = matvec("token_embd.weight", rms(x[size_t(t)], "output_norm.weight"), kVocab);
    return logits;
  }
};

std::vector<double> session_logits(const LlamaModel& m, LlamaSession& s, const std::vector<int32_t>& toks) {
  const LlamaConfig& c = m.config();
  std::vector<float> hidden(toks.size() * size_t(c.d_model)), logits(toks.size() * size_t(c.vocab_size), NAN);
  EXPECT_TRUE(s.forward(toks.data(), int(toks.size()), hidden.data()).ok());
  m.logits(hidden.data(), int(toks.size()), logits.data());
  return std::vector<double>(logits.begin(), logits.end());
}

TEST(TinyLlama, ForwardMatchesNaiveDouble) {
  QDEC_TEST_RNG(rng);
  TinyModel tiny(rng);
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LlamaModel::load(tiny.file, {}, &m).ok());
  EXPECT_EQ(m->config().n_layers, 2);
  EXPECT_EQ(m->config().head_dim, 4);
  EXPECT_TRUE(m->config().tied_embeddings);
  std::vector<int32_t> toks;
  for (int i = 0; i < 9; ++i) toks.push_back(int32_t(rng() % TinyModel::kVocab));
  const auto want = tiny.forward(toks);
  std::vector<double> want_flat;
  for (const auto& r : want) want_flat.insert(want_flat.end(), r.begin(), r.end());
  for (int split : {9, 1, 4}) {  // one window; token by token; windows of 4, 4, 1
    LlamaSession s;
    SessionOptions so;
    so.kv = KvCacheSpec::uniform({true, KvFormat::bf16()});
    ASSERT_TRUE(s.init(m.get(), so).ok());
    std::vector<double> got;
    for (size_t b = 0; b < toks.size(); b += size_t(split)) {
      std::vector<int32_t> part(toks.begin() + long(b), toks.begin() + long(std::min(toks.size(), b + split)));
      const auto l = session_logits(*m, s, part);
      got.insert(got.end(), l.begin(), l.end());
    }
    // fp32 rounding only: over 600 seeds the fp32 forward's relative L2 against float64 reached 4.5e-6
    // (2e-6, the first bar, failed 10 of them: a flaky test); 2e-5 is ~4x that, while any real defect (a wrong
    // RoPE pair, head mapping, norm or cache position) moves the logits by 1e-2 or more.
    EXPECT_LT(rel_l2(got.data(), want_flat.data(), want_flat.size()), 2e-5) << "split " << split;
  }
}

TEST(TinyLlama, ErrorsNameTheValue) {
  QDEC_TEST_RNG(rng);
  TinyModel tiny(rng);
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LlamaModel::load(tiny.file, {}, &m).ok());
  LlamaSession s;
  SessionOptions so;
  so.kv = KvCacheSpec::uniform({false, KvFormat::int4(4)});  // head_dim 4 is not a KV-format head_dim
  Status st = s.init(m.get(), so);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("4"), std::string::npos) << st.to_string();
  so.kv = KvCacheSpec::uniform({true, KvFormat::bf16()});
  so.max_tokens = 4;
  ASSERT_TRUE(s.init(m.get(), so).ok());
  const int32_t bad[1] = {TinyModel::kVocab};
  st = s.forward(bad, 1, nullptr);
  EXPECT_NE(st.message().find("token id 11"), std::string::npos) << st.to_string();
  const int32_t five[5] = {1, 2, 3, 4, 5};
  st = s.forward(five, 5, nullptr);
  EXPECT_NE(st.message().find("max_tokens 4"), std::string::npos) << st.to_string();
  KvCacheSpec spec;
  st = KvCacheSpec::parse("int5", &spec);
  EXPECT_NE(st.message().find("int5"), std::string::npos) << st.to_string();
  ASSERT_TRUE(KvCacheSpec::parse("int8/int4", &spec).ok());
  EXPECT_EQ(spec.name(), "int8/int4");
  ASSERT_TRUE(KvCacheSpec::parse("fp32", &spec).ok());
  EXPECT_TRUE(spec.k.fp32 && spec.v.fp32);
}

TEST(TinyLlama, SmoothScalesPairTheRopeDims) {
  LlamaConfig c;
  c.n_layers = 1;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  const std::vector<float> absmax = {4, 16, 0, 9};
  SmoothScales s;
  ASSERT_TRUE(smooth_scales_from_absmax(c, cpu::RopeStyle::kAdjacent, absmax, 0.5f, &s).ok());
  EXPECT_EQ(s.lambda, (std::vector<float>{4, 4, 3, 3}));  // sqrt(max(4,16)), sqrt(max(0,9))
  ASSERT_TRUE(smooth_scales_from_absmax(c, cpu::RopeStyle::kHalves, absmax, 0.5f, &s).ok());
  EXPECT_EQ(s.lambda, (std::vector<float>{2, 4, 2, 4}));  // pairs (0,2), (1,3)
  SmoothScales back;
  ASSERT_TRUE(smooth_scales_from_json(smooth_scales_to_json(s, cpu::RopeStyle::kHalves), &back).ok());
  EXPECT_EQ(back.lambda, s.lambda);
  EXPECT_FALSE(smooth_scales_from_json("{\"n_layers\":1}", &back).ok());
  EXPECT_FALSE(smooth_scales_from_absmax(c, cpu::RopeStyle::kHalves, {1, 2}, 0.5f, &s).ok());
}

// ---- sampler -----------------------------------------------------------------------------------------------
TEST(Sampler, GreedyTopPTemperature) {
  const float logits[4] = {std::log(0.05f), std::log(0.5f), std::log(0.15f), std::log(0.3f)};
  EXPECT_EQ(argmax(logits, 4), 1);
  Sampler greedy({0.0f, 1.0f, 7});
  EXPECT_EQ(greedy.sample(logits, 4), 1);
  // top-p 0.7: 0.5 + 0.3 reaches it -> tokens 1, 3 renormalized to 0.625, 0.375.
  auto d = sampling_distribution(logits, 4, 1.0f, 0.7f);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].first, 1);
  EXPECT_EQ(d[1].first, 3);
  EXPECT_NEAR(d[0].second, 0.625, 1e-6);
  EXPECT_NEAR(d[1].second, 0.375, 1e-6);
  d = sampling_distribution(logits, 4, 1.0f, 0.5f);  // the top token alone reaches 0.5
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NEAR(d[0].second, 1.0, 1e-6);
  // Temperature 2: p ~ sqrt(p0) -> sqrt(.5), sqrt(.3), sqrt(.15), sqrt(.05) normalized.
  d = sampling_distribution(logits, 4, 2.0f, 1.0f);
  ASSERT_EQ(d.size(), 4u);
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15) + std::sqrt(0.05);
  EXPECT_NEAR(d[0].second, std::sqrt(0.5) / z, 1e-6);
  EXPECT_NEAR(d[3].second, std::sqrt(0.05) / z, 1e-6);
  // Draws follow the truncated distribution.
  QDEC_TEST_RNG(rng);
  Sampler s({1.0f, 0.7f, rng()});
  int counts[4] = {};
  for (int i = 0; i < 20000; ++i) ++counts[s.sample(logits, 4)];
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_NEAR(counts[1] / 20000.0, 0.625, 0.02);
  // Options.
  EXPECT_FALSE(validate_sampler_options({-1.0f, 1.0f, 0}).ok());
  EXPECT_FALSE(validate_sampler_options({1.0f, 0.0f, 0}).ok());
  EXPECT_FALSE(validate_sampler_options({1.0f, 1.5f, 0}).ok());
  EXPECT_TRUE(validate_sampler_options({0.7f, 0.9f, 0}).ok());
}

// ---- chat template -----------------------------------------------------------------------------------------
TEST(ChatTemplate, ChatMLAndUnknown) {
  QDEC_TEST_RNG(rng);
  const std::string chatml =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\nBe brief.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' }}{% endif %}";
  TinyModel tiny(rng, chatml);
  std::string out;
  ASSERT_TRUE(apply_chat_template(tiny.file, {{"user", "Hi"}}, true, &out).ok());
  EXPECT_EQ(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_TRUE(apply_chat_template(tiny.file, {{"system", "S"}, {"user", "U"}}, false, &out).ok());
  EXPECT_EQ(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
  TinyModel other(rng, "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}");
  Status st = apply_chat_template(other.file, {{"user", "Hi"}}, true, &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("[INST]"), std::string::npos) << st.to_string();
  TinyModel none(rng);
  EXPECT_EQ(apply_chat_template(none.file, {{"user", "Hi"}}, true, &out).code(), StatusCode::kInvalidArgument);
}

// ---- SmolLM2 (skipped without models/*.gguf) ----------------------------------------------------------------
struct Smol {
  GgufFile file;
  Tokenizer tok;
  std::unique_ptr<LlamaModel> model;
};

// One thread: ctest runs test processes side by side on CI's two cores, and an oversubscribed OpenBLAS spins.
const Smol* smol() {
  static const std::unique_ptr<Smol> s = []() -> std::unique_ptr<Smol> {
    const std::string path = qdec_find_model();
    if (path.empty()) return nullptr;
    auto p = std::make_unique<Smol>();
    if (!GgufFile::open(path, &p->file).ok() || !Tokenizer::from_gguf(p->file, &p->tok).ok() ||
        !LlamaModel::load(p->file, {/*num_threads=*/1}, &p->model).ok()) {
      return nullptr;
    }
    return p;
  }();
  return s.get();
}

#define SKIP_WITHOUT_MODEL() \
  if (smol() == nullptr) GTEST_SKIP() << "no model: run scripts/fetch_model.sh (or set QDEC_MODEL)";

std::vector<int32_t> encode(const std::string& text) {
  std::vector<int32_t> ids;
  EXPECT_TRUE(smol()->tok.encode(text, &ids).ok());
  return ids;
}

// A window of tokens run as one batch and the same tokens decoded one at a time give the same logits, for
// every cache format: each K/V row is quantized on its own. With the builtin GEMM, whose dot products are
// summed in one order whatever the batch, they are bit for bit equal; with OpenBLAS (different kernels for one
// row and for many) only to float rounding, which a quantized format can amplify at a rounding boundary, so
// that comparison is made in fp32 only.
TEST(SmolLM2, WindowEqualsTokenByTokenDecode) {
  SKIP_WITHOUT_MODEL();
  const LlamaModel& m = *smol()->model;
  const auto toks = encode("The quick brown fox jumps");
  ASSERT_GE(toks.size(), 5u);
  auto compare = [&](const char* fmt, bool builtin) {
    SCOPED_TRACE(::testing::Message() << fmt << (builtin ? " builtin GEMM" : " default GEMM"));
    cpu::use_builtin_gemm(builtin);
    SessionOptions so;
    ASSERT_TRUE(KvCacheSpec::parse(fmt, &so.kv).ok());
    so.max_tokens = 64;
    LlamaSession window, step;
    ASSERT_TRUE(window.init(&m, so).ok());
    ASSERT_TRUE(step.init(&m, so).ok());
    const auto want = session_logits(m, window, toks);
    std::vector<double> got;
    for (int32_t t : toks) {
      const auto l = session_logits(m, step, {t});
      got.insert(got.end(), l.begin(), l.end());
    }
    cpu::use_builtin_gemm(false);
    const double err = rel_l2(got.data(), want.data(), want.size());
    if (builtin) {
      EXPECT_EQ(err, 0.0);
    } else {
      EXPECT_LT(err, 1e-4);
    }
  };
  for (const char* fmt : {"bf16", "int4", "int8/int4"}) compare(fmt, true);
  compare("fp32", false);
}

TEST(SmolLM2, SmoothAttentionIsExactWithoutQuantization) {
  SKIP_WITHOUT_MODEL();
  QDEC_TEST_RNG(rng);
  const LlamaModel& m = *smol()->model;
  const LlamaConfig& c = m.config();
  // Random absmax -> paired lambdas in about [0.5, 4].
  std::uniform_real_distribution<float> u(0.25f, 16.0f);
  std::vector<float> absmax(size_t(c.n_layers) * c.n_kv_heads * c.head_dim);
  for (float& v : absmax) v = u(rng);
  SmoothScales sm;
  ASSERT_TRUE(smooth_scales_from_absmax(c, m.rope_style(), absmax, 0.5f, &sm).ok());
  const auto toks = encode("SmoothAttention moves the quantization error, not the attention scores.");
  SessionOptions plain;
  plain.kv = KvCacheSpec::uniform({true, KvFormat::bf16()});
  plain.max_tokens = 64;
  SessionOptions smooth = plain;
  smooth.smooth = &sm;
  LlamaSession a, b;
  ASSERT_TRUE(a.init(&m, plain).ok());
  ASSERT_TRUE(b.init(&m, smooth).ok());
  const auto la = session_logits(m, a, toks), lb = session_logits(m, b, toks);
  EXPECT_LT(rel_l2(lb.data(), la.data(), la.size()), 1e-5);
}

// Greedy continuations with a bf16 KV cache, recorded from this implementation once their text was checked
// to be sensible English (docs/model.md lists the texts).
TEST(SmolLM2, GoldenGreedyTokensBf16Kv) {
  SKIP_WITHOUT_MODEL();
  const LlamaModel& m = *smol()->model;
  struct Case {
    const char* prompt;
    std::vector<int32_t> want;
  };
  const std::vector<Case> cases = {
      // " Paris.\n\nThe answer is:"
      {"The capital of France is", {7042, 30, 198, 198, 504, 2988, 314, 42}},
      // " girl named Emma who loved to play in"
      {"Once upon a time, there was a little", {8180, 3365, 20391, 617, 5732, 288, 1238, 281}},
      // " around 1,000°" (fluent, if wrong: a 135M model)
      {"Water boils at a temperature of", {1130, 216, 33, 28, 32, 32, 32, 4742}},
  };
  for (const Case& c : cases) {
    const auto toks = encode(c.prompt);
    SessionOptions so;
    so.max_tokens = 64;
    LlamaSession s;
    ASSERT_TRUE(s.init(&m, so).ok());
    std::vector<float> logits(size_t(m.config().vocab_size));
    ASSERT_TRUE(s.forward_last_logits(toks.data(), int(toks.size()), logits.data()).ok());
    std::vector<int32_t> got;
    for (size_t i = 0; i < c.want.size(); ++i) {
      const int32_t next = argmax(logits.data(), m.config().vocab_size);
      got.push_back(next);
      ASSERT_TRUE(s.forward_last_logits(&next, 1, logits.data()).ok());
    }
    std::string text;
    (void)smol()->tok.decode(got, &text);
    std::string ids;
    for (int32_t g : got) ids += std::to_string(g) + ", ";
    EXPECT_EQ(got, c.want) << c.prompt << " -> '" << text << "' ids " << ids;
  }
}

TEST(SmolLM2, ChatTemplateOfTheModel) {
  SKIP_WITHOUT_MODEL();
  std::string out;
  ASSERT_TRUE(apply_chat_template(smol()->file, {{"user", "Hi"}}, true, &out).ok());
  EXPECT_EQ(out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// ---- CLI usage errors ----------------------------------------------------------------------------------------
#ifdef QDEC_CLI_PATH
struct CliResult {
  int code = -1;
  std::string output;
};
CliResult run_cli(const std::string& args) {
  CliResult r;
  const std::string cmd = std::string("'") + QDEC_CLI_PATH + "' " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(QdecCli, BadArgumentsAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate --prompt hi --kv int5", "int5"},
      {"generate --prompt hi --kv int8/int3", "int3"},
      {"generate --prompt hi --temperature -1", "temperature"},
      {"generate --prompt hi --top-p 1.5", "top_p 1.5"},
      {"generate --prompt hi -n 0", "-n 0"},
      {"generate --prompt hi --model /nonexistent/m.gguf", "/nonexistent/m.gguf"},
      {"generate --prompt hi --rope sideways", "sideways"},
      {"ppl --text /dev/null --ctx 1", "--ctx 1"},
      {"ppl --text /dev/null --kv int4+smooth", "--smooth"},
      {"ppl --text /dev/null --kv bf16,,int8", "empty entry"},
      {"ppl --text /dev/null --k-kv int8", "--v-kv"},
      {"calibrate --text /dev/null --out /tmp/x.json --alpha 2", "--alpha 2"},
      // Errors found by the parser itself (CLI11) are usage errors too.
      {"generate -n abc --prompt hi", "abc"},
      {"generate", "--prompt"},
      {"attention --head-dim 96", "96"},
      {"attention --no-such-option", "--no-such-option"},
      {"plan --model llama-2-7b --gpus two", "two"},
      {"", "subcommand is required"},
  };
  for (const auto& [args, needle] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}

#ifdef QDEC_CLI_HAS_BENCH
// The attention benchmark's shape lists are checked before any GPU work: a bad batch size fails the run (code 1)
// naming the option and the value, with or without a GPU.
TEST(QdecCli, BenchAttentionRejectsBadBatchSizes) {
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"bench attention --shapes seed000 --batch 0", "--batch: 0 is not a positive batch size"},
           {"bench attention --shapes smollm2 --smollm2-batch 64,-3", "--smollm2-batch: -3 is not a positive batch"}}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}

// The GEMM benchmark's --timeline needs a QDEC_FUSED_TIMELINE build; elsewhere it fails before any GPU work (code 1,
// naming the option and the CMake switch).
TEST(QdecCli, BenchGemmTimelineNeedsTheProbeBuild) {
  if (wq::fused_timeline_built()) GTEST_SKIP() << "this library is a QDEC_FUSED_TIMELINE build";
  const CliResult r = run_cli("bench gemm --timeline --shapes 4096x4096 --m 1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--timeline needs a library built with -DQDEC_FUSED_TIMELINE=ON"), std::string::npos)
      << r.output;
}

// The same for the attention benchmark's --timeline and QDEC_DECODE_TIMELINE.
TEST(QdecCli, BenchAttentionTimelineNeedsTheProbeBuild) {
  if (attention::decode_timeline_built()) GTEST_SKIP() << "this library is a QDEC_DECODE_TIMELINE build";
  const CliResult r = run_cli("bench attention --timeline --shapes long --formats int4");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--timeline needs a library built with -DQDEC_DECODE_TIMELINE=ON"), std::string::npos)
      << r.output;
}

// The INT8 benchmark's forced W4A8 and W8A8 split counts are checked the same way (code 1, naming the option and
// the value).
TEST(QdecCli, BenchInt8RejectsBadSplitCounts) {
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"bench int8 --w4a8-paths wg128 --w4a8-splits 4,0", "--w4a8-splits: split count 0 is not >= 1"},
           {"bench int8 --w4a8-splits -2", "--w4a8-splits: split count -2 is not >= 1"},
           {"bench int8 --w8a8-splits 0,2,-1", "--w8a8-splits: split count -1 is not >= 0 (0: the planner's)"}}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}

// The benchmarks' clock-state options (--warm-ms, --cool-ms; bench/README.md) are checked the same way. The GEMM
// benchmarks' --cool-ms takes any value (< 0: the automatic rule), the attention benchmark's 0..10000.
TEST(QdecCli, BenchClockOptionsRejectBadValues) {
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"bench int8 --warm-ms -5", "--warm-ms: -5 must be >= 0"},
           {"bench gemm --warm-ms -0.5", "--warm-ms: -0.5 must be >= 0"},
           {"bench attention --cool-ms -1", "--cool-ms: -1 must be in 0..10000"}}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}
#endif
#endif

}  // namespace
}  // namespace qdec
