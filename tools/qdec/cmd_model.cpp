// Model subcommands of the qdec CLI (docs/model.md):
//   qdec generate   --model M --prompt P [--kv F] [-n N] [--temperature T --top-p P --seed S] [--chat]
//   qdec ppl        --model M --text FILE [--kv F[,F...]] [--k-kv F --v-kv F] [--ctx N] [--smooth S.json]
//   qdec calibrate  --model M --text FILE --out S.json   (SmoothAttention scales)
// Output goes to stdout, progress and timings to stderr. Exit codes: 0 ok, 1 failed computation, 2 bad usage
// or input (the message names the value).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "model/cpu_ops.h"
#include "qdec/gguf.h"
#include "qdec/model.h"
#include "qdec/tokenizer.h"

namespace qdec::cli {

namespace {

constexpr const char* kDefaultModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int usage_error(const std::string& msg) {
  fmt::print(stderr, "qdec: error: {}\n", msg);
  return 2;
}

// Status from an input problem (bad file, bad value) -> 2; anything else -> 1.
int status_error(const std::string& what, const Status& s) {
  fmt::print(stderr, "qdec: {}: {}\n", what, s.to_string());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported ? 2 : 1;
}

struct Common {
  std::string model = kDefaultModel;
  int threads = 0;
  std::string rope = "adjacent";
};

void add_common(CLI::App* sub, Common* c) {
  sub->add_option("--model", c->model, "GGUF model file")->capture_default_str();
  sub->add_option("--threads", c->threads, "CPU threads (0 = hardware concurrency)")->capture_default_str();
  sub->add_option("--rope", c->rope, "RoPE pairing: adjacent (GGUF llama) or halves (for comparison only)")
      ->capture_default_str();
}

struct Loaded {
  GgufFile file;
  Tokenizer tok;
  std::unique_ptr<LlamaModel> model;
};

// Loads file, tokenizer and model; prints the GEMM backend and timings on stderr. Returns an exit code or -1.
int load(const Common& c, Loaded* out) {
  if (c.threads < 0) return usage_error(fmt::format("--threads {} is negative", c.threads));
  if (c.rope != "adjacent" && c.rope != "halves") {
    return usage_error(fmt::format("--rope '{}' is not one of: adjacent, halves", c.rope));
  }
  const auto t0 = Clock::now();
  Status s = GgufFile::open(c.model, &out->file);
  if (!s.ok()) {
    return status_error(fmt::format("cannot open model '{}' (scripts/fetch_model.sh fetches the default)", c.model), s);
  }
  s = Tokenizer::from_gguf(out->file, &out->tok);
  if (!s.ok()) return status_error("tokenizer", s);
  ModelLoadOptions lo;
  lo.num_threads = c.threads;
  lo.rope_halves = c.rope == "halves";
  s = LlamaModel::load(out->file, lo, &out->model);
  if (!s.ok()) return status_error("model", s);
  const LlamaConfig& cfg = out->model->config();
  fmt::print(stderr,
             "qdec: {} ({} layers, d_model {}, {} q / {} kv heads, head_dim {}, vocab {}) loaded in {:.2f} s; "
             "{} threads; GEMM: {}; RoPE pairs: {}\n",
             c.model, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.vocab_size,
             seconds_since(t0), out->model->num_threads(), cpu::gemm_backend_name(), c.rope);
  return -1;
}

int read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return usage_error(fmt::format("cannot read '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return -1;
}

// Tokenize a text file (special-token text is plain text here).
int tokenize_file(const Loaded& m, const std::string& path, std::vector<int32_t>* ids) {
  std::string text;
  if (int rc = read_file(path, &text); rc >= 0) return rc;
  if (text.empty()) return usage_error(fmt::format("--text '{}' is empty", path));
  Status s = m.tok.encode(text, ids, /*parse_special=*/false);
  if (!s.ok()) return status_error("tokenize", s);
  return -1;
}

// ---- generate ---------------------------------------------------------------------------------------------
struct GenerateOptions {
  Common common;
  std::string prompt, kv = "bf16", system, smooth;
  int n = 128;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool chat = false;
};

int run_generate(const GenerateOptions& o) {
  KvCacheSpec spec;
  if (Status s = KvCacheSpec::parse(o.kv, &spec); !s.ok()) return usage_error("--kv: " + s.message());
  if (o.n < 1) return usage_error(fmt::format("-n {} must be at least 1", o.n));
  SamplerOptions so{o.temperature, o.top_p, o.seed};
  if (Status s = validate_sampler_options(so); !s.ok()) return usage_error(s.message());
  if (o.prompt.empty()) return usage_error("--prompt is empty");
  Loaded m;
  if (int rc = load(o.common, &m); rc >= 0) return rc;
  SmoothScales smooth;
  if (!o.smooth.empty()) {
    std::string js;
    if (int rc = read_file(o.smooth, &js); rc >= 0) return rc;
    if (Status s = smooth_scales_from_json(js, &smooth); !s.ok()) return status_error("--smooth " + o.smooth, s);
  }
  std::string text = o.prompt;
  if (o.chat) {
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    msgs.push_back({"user", o.prompt});
    if (Status s = apply_chat_template(m.file, msgs, true, &text); !s.ok()) return status_error("--chat", s);
  }
  std::vector<int32_t> ids;
  if (Status s = m.tok.encode(text, &ids, /*parse_special=*/o.chat); !s.ok()) return status_error("tokenize", s);
  if (ids.empty()) return usage_error("the prompt has no tokens");
  const LlamaConfig& cfg = m.model->config();
  if (int(ids.size()) + o.n > cfg.context_length) {
    return usage_error(fmt::format("prompt ({} tokens) + -n {} exceeds the model's context length {}", ids.size(), o.n,
                                   cfg.context_length));
  }
  LlamaSession sess;
  SessionOptions sopt;
  sopt.kv = spec;
  sopt.smooth = o.smooth.empty() ? nullptr : &smooth;
  sopt.max_tokens = int(ids.size()) + o.n;
  if (Status s = sess.init(m.model.get(), sopt); !s.ok()) return status_error("session", s);

  std::vector<float> logits(size_t(cfg.vocab_size));
  auto t0 = Clock::now();
  if (Status s = sess.forward_last_logits(ids.data(), int(ids.size()), logits.data()); !s.ok()) {
    return status_error("forward", s);
  }
  const double prompt_s = seconds_since(t0);
  fmt::print(stderr, "qdec: KV {}{}; prompt {} tokens in {:.2f} s ({:.1f} tok/s); {}\n", spec.name(),
             o.smooth.empty() ? "" : " + SmoothAttention", ids.size(), prompt_s, ids.size() / prompt_s,
             o.temperature == 0.0f ? "greedy"
                                   : fmt::format("temperature {} top-p {} seed {}", o.temperature, o.top_p, o.seed));
  Sampler sampler(so);
  const bool progress = !isatty(STDOUT_FILENO);
  if (!o.chat) {
    fmt::print("{}", o.prompt);
    std::fflush(stdout);
  }
  t0 = Clock::now();
  int generated = 0;
  for (; generated < o.n; ++generated) {
    const int32_t next = sampler.sample(logits.data(), cfg.vocab_size);
    if (next == m.tok.eos_id() || m.tok.token_type(next) == Tokenizer::kControl) break;
    std::string piece;
    (void)m.tok.decode({next}, &piece);
    fmt::print("{}", piece);
    std::fflush(stdout);
    if (generated + 1 == o.n) {
      ++generated;
      break;
    }
    if (Status s = sess.forward_last_logits(&next, 1, logits.data()); !s.ok()) return status_error("forward", s);
    if (progress && (generated + 1) % 64 == 0) {
      fmt::print(stderr, "qdec: {} tokens, {:.1f} tok/s\n", generated + 1, (generated + 1) / seconds_since(t0));
    }
  }
  fmt::print("\n");
  std::fflush(stdout);
  const double gen_s = seconds_since(t0);
  fmt::print(stderr, "qdec: generated {} tokens in {:.2f} s ({:.1f} tok/s)\n", generated, gen_s,
             generated / std::max(gen_s, 1e-9));
  return 0;
}

// ---- ppl --------------------------------------------------------------------------------------------------
struct PplOptions {
  Common common;
  std::string text, kv = "bf16", k_kv, v_kv, ref_kv = "bf16", smooth, json;
  int ctx = 512;
  int64_t max_tokens = 0;
};

struct PplRun {
  KvCacheSpec kv;
  bool smooth = false;
  std::string label;
  double nll = 0.0, kl = 0.0, seconds = 0.0;
  int64_t top1_agree = 0, scored = 0;
};

// log-softmax of logits [rows x vocab] in place, in parallel over rows.
void log_softmax_rows(cpu::ThreadPool& pool, float* x, int rows, int vocab) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = x + size_t(r) * vocab;
      float mx = -INFINITY;
      for (int i = 0; i < vocab; ++i) mx = std::max(mx, row[i]);
      double sum = 0.0;
      for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i] - mx));
      const float lse = float(double(mx) + std::log(sum));
      for (int i = 0; i < vocab; ++i) row[i] -= lse;
    }
  });
}

int run_ppl(const PplOptions& o) {
  std::vector<PplRun> runs;
  auto add_spec = [&](std::string s, bool smooth) -> int {
    const std::string suffix = "+smooth";
    if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
      smooth = true;
      s.resize(s.size() - suffix.size());
    }
    PplRun r;
    if (Status st = KvCacheSpec::parse(s, &r.kv); !st.ok()) return usage_error("--kv: " + st.message());
    r.smooth = smooth;
    r.label = r.kv.name() + (smooth ? "+smooth" : "");
    runs.push_back(r);
    return -1;
  };
  if (o.k_kv.empty() != o.v_kv.empty()) return usage_error("--k-kv and --v-kv go together");
  if (!o.k_kv.empty()) {
    if (int rc = add_spec(o.k_kv + "/" + o.v_kv, false); rc >= 0) return rc;
  }
  if (o.k_kv.empty() || o.kv != "bf16") {
    std::stringstream ss(o.kv);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) return usage_error(fmt::format("--kv '{}' has an empty entry", o.kv));
      if (int rc = add_spec(item, false); rc >= 0) return rc;
    }
  }
  const bool any_smooth = std::any_of(runs.begin(), runs.end(), [](const PplRun& r) { return r.smooth; });
  if (!o.smooth.empty() && !any_smooth) {
    for (PplRun& r : runs) {  // --smooth without any +smooth entry: smooth them all
      r.smooth = true;
      r.label += "+smooth";
    }
  }
  if (any_smooth && o.smooth.empty()) return usage_error("a '+smooth' --kv entry needs --smooth SCALES.json");
  KvCacheSpec ref;
  if (Status st = KvCacheSpec::parse(o.ref_kv, &ref); !st.ok()) return usage_error("--ref-kv: " + st.message());
  if (o.ctx < 2) return usage_error(fmt::format("--ctx {} must be at least 2", o.ctx));
  if (o.max_tokens < 0) return usage_error(fmt::format("--max-tokens {} is negative", o.max_tokens));
  if (!o.json.empty() && !std::ofstream(o.json)) return usage_error(fmt::format("cannot write --json '{}'", o.json));

  Loaded m;
  if (int rc = load(o.common, &m); rc >= 0) return rc;
  const LlamaConfig& cfg = m.model->config();
  if (o.ctx > cfg.context_length) {
    return usage_error(fmt::format("--ctx {} exceeds the model's context length {}", o.ctx, cfg.context_length));
  }
  SmoothScales smooth;
  if (!o.smooth.empty()) {
    std::string js;
    if (int rc = read_file(o.smooth, &js); rc >= 0) return rc;
    if (Status s = smooth_scales_from_json(js, &smooth); !s.ok()) return status_error("--smooth " + o.smooth, s);
  }
  std::vector<int32_t> ids;
  if (int rc = tokenize_file(m, o.text, &ids); rc >= 0) return rc;
  int64_t usable = int64_t(ids.size());
  if (o.max_tokens > 0) usable = std::min(usable, o.max_tokens);
  const int64_t windows = usable / o.ctx;
  if (windows == 0) {
    return usage_error(fmt::format("--text '{}' has {} tokens (limit {}), fewer than one window of --ctx {}", o.text,
                                   ids.size(), usable, o.ctx));
  }
  fmt::print(stderr, "qdec: {} tokens in '{}'; {} windows of {} tokens ({} scored per window); reference KV {}\n",
             ids.size(), o.text, windows, o.ctx, o.ctx - 1, ref.name());

  const int V = cfg.vocab_size, d = cfg.d_model, T = o.ctx;
  auto make_session = [&](const KvCacheSpec& kv, bool sm, LlamaSession* s) {
    SessionOptions so;
    so.kv = kv;
    so.smooth = sm ? &smooth : nullptr;
    so.max_tokens = T;
    return s->init(m.model.get(), so);
  };
  LlamaSession ref_sess;
  if (Status s = make_session(ref, false, &ref_sess); !s.ok()) return status_error("session", s);
  std::vector<LlamaSession> sessions(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    if (Status s = make_session(runs[i].kv, runs[i].smooth, &sessions[i]); !s.ok()) return status_error("session", s);
  }
  std::vector<float> hidden(size_t(T) * d), ref_lp(size_t(T) * V), ref_p(size_t(T) * V);
  std::vector<int32_t> ref_top1(static_cast<size_t>(T));
  constexpr int kChunk = 64;  // rows of logits at a time for the runs
  std::vector<float> lp(size_t(kChunk) * V);
  cpu::ThreadPool& pool = m.model->pool();
  double ref_nll = 0.0, ref_seconds = 0.0;
  // Results over the first `done` windows: the table on stdout when final, the JSON (rewritten after every
  // window, so a long run that is stopped still leaves its windows so far) with --json.
  auto report = [&](int64_t done, bool final) {
    const int64_t scored = done * (T - 1);
    const double ref_ppl = std::exp(ref_nll / double(scored));
    if (final) {
      fmt::print(
          "# ppl: '{}', {} windows x {} tokens (ctx {}), {} scored tokens; KL(ref || kv) vs KV {} (ppl {:.4f})\n",
          o.text, done, T, T, scored, ref.name(), ref_ppl);
      fmt::print("{:<16} {:>10} {:>9} {:>12} {:>8} {:>9}\n", "kv", "ppl", "vs ref", "mean KL", "top1", "seconds");
    }
    nlohmann::json out;
    out["text"] = o.text;
    out["ctx"] = T;
    out["windows"] = done;
    out["windows_planned"] = windows;
    out["scored_tokens"] = scored;
    out["ref_kv"] = ref.name();
    out["ref_ppl"] = ref_ppl;
    out["gemm"] = cpu::gemm_backend_name();
    out["threads"] = m.model->num_threads();
    out["rope"] = o.common.rope;
    for (const PplRun& r : runs) {
      const double ppl = std::exp(r.nll / double(r.scored));
      const double seconds = r.seconds > 0.0 ? r.seconds : ref_seconds;
      if (final) {
        fmt::print("{:<16} {:>10.4f} {:>+8.3f}% {:>12.3e} {:>7.2f}% {:>9.1f}\n", r.label, ppl,
                   100.0 * (ppl / ref_ppl - 1.0), r.kl / double(r.scored),
                   100.0 * double(r.top1_agree) / double(r.scored), seconds);
      }
      out["runs"].push_back({{"kv", r.label},
                             {"ppl", ppl},
                             {"ppl_vs_ref_pct", 100.0 * (ppl / ref_ppl - 1.0)},
                             {"mean_kl", r.kl / double(r.scored)},
                             {"top1_agree", double(r.top1_agree) / double(r.scored)},
                             {"seconds", seconds}});
    }
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      f << out.dump(2) << "\n";
    }
  };
  const auto t_all = Clock::now();
  for (int64_t w = 0; w < windows; ++w) {
    const int32_t* tok = ids.data() + w * T;
    auto t0 = Clock::now();
    ref_sess.reset();
    if (Status s = ref_sess.forward(tok, T, hidden.data()); !s.ok()) return status_error("forward", s);
    m.model->logits(hidden.data(), T, ref_lp.data());
    log_softmax_rows(pool, ref_lp.data(), T, V);
    pool.parallel_for(T, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* a = &ref_lp[size_t(r) * V];
        float* p = &ref_p[size_t(r) * V];
        for (int i = 0; i < V; ++i) p[i] = std::exp(a[i]);
        ref_top1[size_t(r)] = argmax(a, V);
      }
    });
    for (int t = 0; t + 1 < T; ++t) ref_nll -= ref_lp[size_t(t) * V + size_t(tok[t + 1])];
    ref_seconds += seconds_since(t0);
    for (size_t i = 0; i < runs.size(); ++i) {
      PplRun& r = runs[i];
      t0 = Clock::now();
      if (r.kv == ref && !r.smooth) {  // the reference itself
        for (int t = 0; t + 1 < T; ++t) r.nll -= ref_lp[size_t(t) * V + size_t(tok[t + 1])];
        r.top1_agree += T - 1;
        r.scored += T - 1;
        continue;
      }
      sessions[i].reset();
      if (Status s = sessions[i].forward(tok, T, hidden.data()); !s.ok()) return status_error("forward", s);
      for (int c0 = 0; c0 < T - 1; c0 += kChunk) {
        const int rows = std::min(T - 1, c0 + kChunk) - c0;
        m.model->logits(hidden.data() + size_t(c0) * d, rows, lp.data());
        log_softmax_rows(pool, lp.data(), rows, V);
        std::vector<double> kl(static_cast<size_t>(rows));
        std::vector<int> agree(static_cast<size_t>(rows));
        pool.parallel_for(rows, [&](int64_t q0, int64_t q1) {
          for (int64_t q = q0; q < q1; ++q) {
            const float* a = &lp[size_t(q) * V];
            const float* rl = &ref_lp[size_t(c0 + q) * V];
            const float* rp = &ref_p[size_t(c0 + q) * V];
            double acc = 0.0;
            for (int v = 0; v < V; ++v) acc += double(rp[v] * (rl[v] - a[v]));
            kl[size_t(q)] = acc;
            agree[size_t(q)] = argmax(a, V) == ref_top1[size_t(c0 + q)];
          }
        });
        for (int q = 0; q < rows; ++q) {
          r.nll -= lp[size_t(q) * V + size_t(tok[c0 + q + 1])];
          r.kl += kl[size_t(q)];
          r.top1_agree += agree[size_t(q)];
        }
      }
      r.scored += T - 1;
      r.seconds += seconds_since(t0);
    }
    const double el = seconds_since(t_all);
    fmt::print(stderr, "qdec: window {}/{} done, {:.1f} s elapsed, {:.0f} tokens/s per KV format\n", w + 1, windows, el,
               double(w + 1) * T * double(runs.size() + 1) / el);
    report(w + 1, /*final=*/false);
  }
  report(windows, /*final=*/true);
  return 0;
}

// ---- calibrate --------------------------------------------------------------------------------------------
struct CalibrateOptions {
  Common common;
  std::string text, out;
  int ctx = 512;
  int64_t max_tokens = 0;
  float alpha = 0.5f;
};

int run_calibrate(const CalibrateOptions& o) {
  if (o.ctx < 1) return usage_error(fmt::format("--ctx {} must be at least 1", o.ctx));
  if (!(o.alpha >= 0.0f && o.alpha <= 1.0f)) return usage_error(fmt::format("--alpha {} is outside [0, 1]", o.alpha));
  if (o.out.empty()) return usage_error("--out is empty");
  Loaded m;
  if (int rc = load(o.common, &m); rc >= 0) return rc;
  std::vector<int32_t> ids;
  if (int rc = tokenize_file(m, o.text, &ids); rc >= 0) return rc;
  int64_t usable = int64_t(ids.size());
  if (o.max_tokens > 0) usable = std::min(usable, o.max_tokens);
  LlamaSession sess;
  SessionOptions so;
  so.kv = KvCacheSpec::uniform({true, KvFormat::bf16()});  // fp32: calibrate on unquantized K
  so.max_tokens = o.ctx;
  if (Status s = sess.init(m.model.get(), so); !s.ok()) return status_error("session", s);
  std::vector<float> absmax;
  sess.set_k_absmax_observer(&absmax);
  const auto t0 = Clock::now();
  for (int64_t p = 0; p < usable; p += o.ctx) {
    sess.reset();
    const int n = int(std::min<int64_t>(o.ctx, usable - p));
    if (Status s = sess.forward(ids.data() + p, n, nullptr); !s.ok()) return status_error("forward", s);
  }
  SmoothScales sm;
  if (Status s = smooth_scales_from_absmax(m.model->config(), m.model->rope_style(), absmax, o.alpha, &sm); !s.ok()) {
    return status_error("calibrate", s);
  }
  std::ofstream f(o.out);
  if (!f) return usage_error(fmt::format("cannot write --out '{}'", o.out));
  f << smooth_scales_to_json(sm, m.model->rope_style()) << "\n";
  const auto [lo, hi] = std::minmax_element(sm.lambda.begin(), sm.lambda.end());
  fmt::print(stderr, "qdec: calibrated on {} tokens of '{}' in {:.1f} s; lambda in [{:.3f}, {:.3f}]; wrote {}\n",
             usable, o.text, seconds_since(t0), *lo, *hi, o.out);
  return 0;
}

}  // namespace

void register_model_commands(CLI::App& app, Registry& reg) {
  auto g = std::make_shared<GenerateOptions>();
  auto* gen = app.add_subcommand("generate", "generate text with the CPU reference forward");
  add_common(gen, &g->common);
  gen->add_option("--prompt", g->prompt, "prompt text")->required();
  gen->add_option("--kv", g->kv, "KV-cache format: fp32, bf16, fp16, fp8e4m3, ..., or KFMT/VFMT")
      ->capture_default_str();
  gen->add_option("-n,--max-new-tokens", g->n, "tokens to generate")->capture_default_str();
  gen->add_option("--temperature", g->temperature, "0 = greedy")->capture_default_str();
  gen->add_option("--top-p", g->top_p, "nucleus sampling threshold")->capture_default_str();
  gen->add_option("--seed", g->seed, "sampling seed")->capture_default_str();
  gen->add_flag("--chat", g->chat, "wrap the prompt in the model's chat template (ChatML)");
  gen->add_option("--system", g->system, "system message for --chat (default: the template's)");
  gen->add_option("--smooth", g->smooth, "SmoothAttention scales (qdec calibrate)");
  reg.add(gen, [g] { return run_generate(*g); });

  auto p = std::make_shared<PplOptions>();
  auto* ppl = app.add_subcommand("ppl", "perplexity and KL divergence vs a reference KV format");
  add_common(ppl, &p->common);
  ppl->add_option("--text", p->text, "text file (UTF-8)")->required();
  ppl->add_option("--kv", p->kv, "comma-separated KV formats: NAME, KFMT/VFMT, NAME+smooth")->capture_default_str();
  ppl->add_option("--k-kv", p->k_kv, "K format of a mixed entry (with --v-kv)");
  ppl->add_option("--v-kv", p->v_kv, "V format of a mixed entry (with --k-kv)");
  ppl->add_option("--ref-kv", p->ref_kv, "reference format for the KL divergence")->capture_default_str();
  ppl->add_option("--ctx", p->ctx, "window length (non-overlapping windows)")->capture_default_str();
  ppl->add_option("--max-tokens", p->max_tokens, "use only the first N tokens of the text (0 = all)")
      ->capture_default_str();
  ppl->add_option("--smooth", p->smooth, "SmoothAttention scales (qdec calibrate)");
  ppl->add_option("--json", p->json, "also write the results as JSON here");
  reg.add(ppl, [p] { return run_ppl(*p); });

  auto c = std::make_shared<CalibrateOptions>();
  auto* cal = app.add_subcommand("calibrate", "SmoothAttention scales from a calibration text");
  add_common(cal, &c->common);
  cal->add_option("--text", c->text, "calibration text file")->required();
  cal->add_option("--out", c->out, "output JSON")->required();
  cal->add_option("--ctx", c->ctx, "window length")->capture_default_str();
  cal->add_option("--max-tokens", c->max_tokens, "use only the first N tokens (0 = all)")->capture_default_str();
  cal->add_option("--alpha", c->alpha, "lambda = max|K|^alpha")->capture_default_str();
  reg.add(cal, [c] { return run_calibrate(*c); });
}

}  // namespace qdec::cli
