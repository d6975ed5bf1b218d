// qdec plan: KV-cache capacity planner (docs/kvcache.md, "Capacity planner").
//   qdec plan --model llama-2-70b --gpu-mem 80GB --gpus 8 --weight-bytes 2 --kv int8 [--context 4096] [--json]
// Prints, for every KV format, bytes per token (per GPU and over all GPUs, scales included), the tokens that fit
// in the memory left after weights and reserve, and the largest batch of `--context`-token sequences.
#include <fmt/core.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "qdec/formats.h"
#include "qdec/planner.h"

namespace qdec::cli {

namespace {

// Numbers are taken as text and parsed here, so that a bad value exits with 2 and a message naming it (CLI11's
// own conversion errors exit with its codes).
struct PlanCliOptions {
  std::string model;
  std::string layers, kv_heads, head_dim, qo_heads;  // empty: not given (the preset's value)
  std::string params;
  std::string gpu_mem = "80GB";
  std::string gpus = "1";
  std::string weight_bytes = "2";
  std::string kv = "bf16";
  std::string context = "4096";
  std::string reserve = "2GB";
  std::string page_size = "64";
  bool json = false;
};

int usage_error(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.to_string());
  return 2;
}

// A whole number in int range; false (after printing the error) otherwise.
bool parse_int(const char* option, const std::string& text, int* out) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) {
    fmt::print(stderr, "error: {} '{}' is not an integer\n", option, text);
    return false;
  }
  *out = v;
  return true;
}

bool parse_double(const char* option, const std::string& text, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
    fmt::print(stderr, "error: {} '{}' is not a number\n", option, text);
    return false;
  }
  *out = v;
  return true;
}

std::string gb(double bytes) {
  return fmt::format("{:.2f}", bytes / 1e9);
}

int run_plan(const PlanCliOptions& c) {
  PlanOptions o;
  if (!c.model.empty()) {
    if (Status s = model_preset(c.model, &o.model); !s.ok()) return usage_error(s);
  } else {
    o.model.name = "custom";
    if (c.layers.empty() || c.kv_heads.empty() || c.head_dim.empty() || c.params.empty()) {
      fmt::print(stderr, "error: give --model (presets: {}) or all of --layers, --kv-heads, --head-dim, --params\n",
                 fmt::join(model_preset_names(), ", "));
      return 2;
    }
  }
  // Explicit shape options override the preset's values.
  for (auto [option, text, field] : {std::tuple{"--layers", &c.layers, &o.model.num_layers},
                                     std::tuple{"--kv-heads", &c.kv_heads, &o.model.num_kv_heads},
                                     std::tuple{"--head-dim", &c.head_dim, &o.model.head_dim},
                                     std::tuple{"--qo-heads", &c.qo_heads, &o.model.num_qo_heads}}) {
    if (!text->empty() && !parse_int(option, *text, field)) return 2;
  }
  if (!c.params.empty()) {
    if (Status s = parse_param_count(c.params, &o.model.num_params); !s.ok()) return usage_error(s);
  }
  if (Status s = parse_memory_size(c.gpu_mem, &o.gpu_mem_bytes); !s.ok()) return usage_error(s);
  if (Status s = parse_memory_size(c.reserve, &o.reserve_bytes); !s.ok()) return usage_error(s);
  if (!parse_int("--gpus", c.gpus, &o.gpus) || !parse_int("--context", c.context, &o.context) ||
      !parse_int("--page-size", c.page_size, &o.page_size) ||
      !parse_double("--weight-bytes", c.weight_bytes, &o.weight_bytes_per_param)) {
    return 2;
  }
  KvFormat highlight;
  if (Status s = parse_kv_format(c.kv, &highlight); !s.ok()) return usage_error(s);
  std::vector<PlanRow> rows;
  if (Status s = plan_all_formats(o, &rows); !s.ok()) return usage_error(s);

  const ModelShape& m = o.model;
  const PlanRow& r0 = rows.front();  // bf16
  if (c.json) {
    nlohmann::json j;
    j["units"] = "bytes; GB = 1e9 bytes";
    j["model"] = {{"name", m.name},
                  {"num_layers", m.num_layers},
                  {"num_qo_heads", m.num_qo_heads},
                  {"num_kv_heads", m.num_kv_heads},
                  {"head_dim", m.head_dim},
                  {"num_params", m.num_params}};
    j["options"] = {{"gpu_mem_bytes", o.gpu_mem_bytes},
                    {"gpus", o.gpus},
                    {"weight_bytes_per_param", o.weight_bytes_per_param},
                    {"reserve_bytes_per_gpu", o.reserve_bytes},
                    {"context", o.context},
                    {"page_size", o.page_size},
                    {"kv", highlight.name()}};
    j["kv_heads_per_gpu"] = r0.kv_heads_per_gpu;
    j["kv_head_replicas"] = r0.kv_head_replicas;
    j["weight_bytes_per_gpu"] = r0.weight_bytes_per_gpu;
    j["kv_bytes_per_gpu"] = r0.kv_bytes_per_gpu;
    for (const PlanRow& r : rows) {
      j["rows"].push_back({{"format", r.k_format.name()},
                           {"selected", r.k_format == highlight},
                           {"bytes_per_token_gpu", r.bytes_per_token_gpu},
                           {"bytes_per_token_all_gpus", r.bytes_per_token_all_gpus},
                           {"bytes_per_token_logical", r.bytes_per_token_logical},
                           {"tokens", r.tokens},
                           {"pages", r.pages},
                           {"pages_per_seq", r.pages_per_seq},
                           {"max_batch", r.max_batch}});
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("model {}: {} layers, {} KV heads x head_dim {}{}, {:.2f}B parameters\n", m.name, m.num_layers,
             m.num_kv_heads, m.head_dim, m.num_qo_heads ? fmt::format(", {} query heads", m.num_qo_heads) : "",
             m.num_params / 1e9);
  fmt::print(
      "memory (GB = 10^9 bytes): {} GPU{} x {} GB; weights {} B/param = {} GB per GPU; reserve {} GB per GPU;"
      " KV cache {} GB per GPU\n",
      o.gpus, o.gpus == 1 ? "" : "s", gb(o.gpu_mem_bytes), o.weight_bytes_per_param, gb(r0.weight_bytes_per_gpu),
      gb(o.reserve_bytes), gb(r0.kv_bytes_per_gpu));
  fmt::print("tensor parallel: {} KV head{} per GPU{}; context {} tokens = {} pages of {}\n\n", r0.kv_heads_per_gpu,
             r0.kv_heads_per_gpu == 1 ? "" : "s",
             r0.kv_head_replicas > 1 ? fmt::format(" (each KV head replicated on {} GPUs)", r0.kv_head_replicas) : "",
             o.context, r0.pages_per_seq, o.page_size);
  fmt::print("  {:<9} {:>12} {:>14} {:>8} {:>12} {:>10} {:>10}\n", "format", "B/token/GPU", "B/token total", "vs bf16",
             "tokens", "pages", fmt::format("batch@{}", o.context));
  for (const PlanRow& r : rows) {
    fmt::print("{} {:<9} {:>12} {:>14} {:>7.2f}x {:>12} {:>10} {:>10}\n", r.k_format == highlight ? "*" : " ",
               r.k_format.name(), r.bytes_per_token_gpu, r.bytes_per_token_all_gpus,
               double(r0.bytes_per_token_gpu) / double(r.bytes_per_token_gpu), r.tokens, r.pages, r.max_batch);
  }
  fmt::print(
      "\n* = --kv {}. B/token: K and V, data and scales, all layers; total = over all GPUs (replicas "
      "included). Tokens: per GPU, and every GPU holds every token.\n",
      highlight.name());
  return 0;
}

}  // namespace

void register_plan_command(CLI::App& app, Registry& reg) {
  auto c = std::make_shared<PlanCliOptions>();
  CLI::App* sub = app.add_subcommand("plan", "KV-cache capacity planner: tokens and batch that fit, every KV format");
  sub->add_option("--model", c->model, "preset: " + fmt::format("{}", fmt::join(model_preset_names(), ", ")));
  sub->add_option("--layers", c->layers, "decoder layers (explicit shape; overrides the preset)")->type_name("INT");
  sub->add_option("--kv-heads", c->kv_heads, "KV heads")->type_name("INT");
  sub->add_option("--head-dim", c->head_dim, "head dimension (64, 128, 256)")->type_name("INT");
  sub->add_option("--qo-heads", c->qo_heads, "query heads (--gpus must divide them)")->type_name("INT");
  sub->add_option("--params", c->params, "parameter count: 70B, 135M, 6.74e9");
  sub->add_option("--gpu-mem", c->gpu_mem, "memory per GPU: 80GB (10^9 bytes) or 80GiB (2^30 bytes)")
      ->capture_default_str();
  sub->add_option("--gpus", c->gpus, "tensor-parallel GPUs (split the KV heads)")
      ->type_name("INT")
      ->capture_default_str();
  sub->add_option("--weight-bytes", c->weight_bytes, "bytes per weight parameter (2 = bf16, 1 = 8-bit, 0.5 = 4-bit)")
      ->type_name("FLOAT")
      ->capture_default_str();
  sub->add_option("--kv", c->kv, "KV format to highlight (the table has every format)")->capture_default_str();
  sub->add_option("--context", c->context, "tokens per sequence for the max batch")
      ->type_name("INT")
      ->capture_default_str();
  sub->add_option("--reserve,--reserve-gb", c->reserve,
                  "memory per GPU kept back for activations, workspaces and the CUDA context")
      ->capture_default_str();
  sub->add_option("--page-size", c->page_size, "tokens per KV page")->type_name("INT")->capture_default_str();
  sub->add_flag("--json", c->json, "JSON instead of the table");
  reg.add(sub, [c] { return run_plan(*c); });
}

}  // namespace qdec::cli
