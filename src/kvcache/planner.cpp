// KV-cache capacity planner (include/qdec/planner.h; docs/kvcache.md, "Capacity planner").
#include "qdec/planner.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace qdec {

namespace {

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

// Published configs (Hugging Face config.json of each model).
ModelShape make_shape(const char* name, int layers, int hidden, int intermediate, int qo_heads, int kv_heads, int vocab,
                      bool tied) {
  ModelShape m;
  m.name = name;
  m.num_layers = layers;
  m.hidden = hidden;
  m.intermediate = intermediate;
  m.num_qo_heads = qo_heads;
  m.num_kv_heads = kv_heads;
  m.head_dim = hidden / qo_heads;
  m.vocab = vocab;
  m.tied_embeddings = tied;
  m.num_params = llama_param_count(m);
  return m;
}

std::vector<ModelShape> presets() {
  return {
      //          name            layers hidden  inter  q   kv  vocab   tied
      make_shape("llama-2-7b", 32, 4096, 11008, 32, 32, 32000, false),
      make_shape("llama-2-70b", 80, 8192, 28672, 64, 8, 32000, false),
      make_shape("llama-3-8b", 32, 4096, 14336, 32, 8, 128256, false),
      make_shape("llama-3-70b", 80, 8192, 28672, 64, 8, 128256, false),
      make_shape("smollm2-135m", 30, 576, 1536, 9, 3, 49152, true),
  };
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Splits "80.5 GiB" into the number (parsed as a finite, non-negative double) and the lower-cased unit.
bool split_number(std::string_view text, double* value, std::string* unit) {
  const std::string s = trim(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                          ((s[i] == '+' || s[i] == '-') && i > 0 && (s[i - 1] == 'e' || s[i - 1] == 'E')))) {
    ++i;
  }
  // A trailing 'e' belongs to no exponent ("2e" is not a number): give it back to the unit.
  while (i > 0 && (s[i - 1] == 'e' || s[i - 1] == 'E')) --i;
  if (i == 0) return false;
  const std::string num = s.substr(0, i);
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !std::isfinite(v) || v < 0) return false;
  *value = v;
  unit->clear();
  for (char c : trim(std::string_view(s).substr(i))) unit->push_back(static_cast<char>(std::tolower(c)));
  return true;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string gb(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GB", double(bytes) / 1e9);
  return buf;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelShape& m : presets()) names.push_back(m.name);
  return names;
}

Status model_preset(std::string_view name, ModelShape* out) {
  if (out == nullptr) return invalid("model_preset: output pointer is null");
  std::string list;
  for (const ModelShape& m : presets()) {
    if (m.name == name) {
      *out = m;
      return Status::Ok();
    }
    list += (list.empty() ? "" : ", ") + m.name;
  }
  return invalid("unknown model preset '" + std::string(name) + "' (presets: " + list + ")");
}

int64_t llama_param_count(const ModelShape& m) {
  const int64_t h = m.hidden, d = m.head_dim, q = int64_t(m.num_qo_heads) * d, kv = int64_t(m.num_kv_heads) * d;
  const int64_t attn = h * q + 2 * h * kv + q * h;  // q, k, v, o projections (no biases)
  const int64_t mlp = 3 * h * m.intermediate;       // gate, up, down
  const int64_t norms = 2 * h;                      // attention and MLP RMSNorm weights
  const int64_t embed = int64_t(m.vocab) * h * (m.tied_embeddings ? 1 : 2);
  return m.num_layers * (attn + mlp + norms) + embed + h;  // + final norm
}

Status plan_capacity(const PlanOptions& o, const KvFormat& k_format, const KvFormat& v_format, PlanRow* row) {
  if (row == nullptr) return invalid("plan_capacity: output pointer is null");
  const ModelShape& m = o.model;
  if (m.num_layers < 1) return invalid("num_layers " + std::to_string(m.num_layers) + " must be >= 1");
  if (m.num_kv_heads < 1) return invalid("num_kv_heads " + std::to_string(m.num_kv_heads) + " must be >= 1");
  if (m.num_params < 1) return invalid("parameter count " + std::to_string(m.num_params) + " must be >= 1");
  QDEC_RETURN_IF_ERROR(validate_kv_format(k_format, m.head_dim));
  QDEC_RETURN_IF_ERROR(validate_kv_format(v_format, m.head_dim));
  if (o.gpus < 1) return invalid("gpus " + std::to_string(o.gpus) + " must be >= 1");
  if (o.gpu_mem_bytes < 1) return invalid("GPU memory " + std::to_string(o.gpu_mem_bytes) + " bytes must be > 0");
  if (o.reserve_bytes < 0) return invalid("reserve " + std::to_string(o.reserve_bytes) + " bytes must be >= 0");
  if (!(o.weight_bytes_per_param > 0) || !std::isfinite(o.weight_bytes_per_param) || o.weight_bytes_per_param > 64) {
    return invalid("weight bytes per parameter " + num(o.weight_bytes_per_param) + " must be in (0, 64]");
  }
  if (o.context < 1) return invalid("context " + std::to_string(o.context) + " must be >= 1 token");
  if (o.page_size < 1 || (o.page_size & (o.page_size - 1)) != 0 || o.page_size > 65536) {
    return invalid("page_size " + std::to_string(o.page_size) + " is not a power of two in 1..65536");
  }
  const int kv = m.num_kv_heads, g = o.gpus;
  if (kv >= g ? kv % g != 0 : g % kv != 0) {
    return invalid("num_kv_heads " + std::to_string(kv) + " and gpus " + std::to_string(g) +
                   ": tensor parallelism needs one to divide the other");
  }
  if (m.num_qo_heads > 0 && m.num_qo_heads % g != 0) {
    return invalid("num_qo_heads " + std::to_string(m.num_qo_heads) + " is not divisible by gpus " + std::to_string(g) +
                   " (tensor parallelism splits the query heads)");
  }
  PlanRow r;
  r.k_format = k_format;
  r.v_format = v_format;
  r.kv_heads_per_gpu = kv >= g ? kv / g : 1;
  r.kv_head_replicas = kv >= g ? 1 : g / kv;
  const int64_t row_bytes = int64_t(kv_row_bytes(k_format, m.head_dim)) + kv_row_bytes(v_format, m.head_dim);
  r.bytes_per_token_gpu = int64_t(m.num_layers) * r.kv_heads_per_gpu * row_bytes;
  r.bytes_per_token_all_gpus = r.bytes_per_token_gpu * g;
  r.bytes_per_token_logical = int64_t(m.num_layers) * kv * row_bytes;
  const long double weights = (long double)m.num_params * o.weight_bytes_per_param / g;
  if (weights > (long double)o.gpu_mem_bytes) {
    return invalid("weights of " + std::to_string(m.num_params) + " parameters x " + num(o.weight_bytes_per_param) +
                   " bytes / " + std::to_string(g) + (g == 1 ? " GPU = " : " GPUs = ") + gb(int64_t(weights)) +
                   " per GPU do not fit in " + gb(o.gpu_mem_bytes) + " of GPU memory");
  }
  r.weight_bytes_per_gpu = static_cast<int64_t>(std::ceil(weights));
  r.kv_bytes_per_gpu = o.gpu_mem_bytes - o.reserve_bytes - r.weight_bytes_per_gpu;
  if (r.kv_bytes_per_gpu <= 0) {
    return invalid("no memory left for the KV cache: " + gb(o.gpu_mem_bytes) + " per GPU - reserve " +
                   gb(o.reserve_bytes) + " - weights " + gb(r.weight_bytes_per_gpu) + " = " + gb(r.kv_bytes_per_gpu) +
                   " (more GPUs, fewer weight bytes or a smaller reserve)");
  }
  r.tokens = r.kv_bytes_per_gpu / r.bytes_per_token_gpu;
  r.pages = r.tokens / o.page_size;
  r.pages_per_seq = (int64_t(o.context) + o.page_size - 1) / o.page_size;
  r.max_batch = r.pages / r.pages_per_seq;
  *row = r;
  return Status::Ok();
}

Status plan_all_formats(const PlanOptions& opts, std::vector<PlanRow>* rows) {
  if (rows == nullptr) return invalid("plan_all_formats: output pointer is null");
  std::vector<PlanRow> out;
  for (const KvFormat& f : all_kv_formats()) {
    PlanRow r;
    QDEC_RETURN_IF_ERROR(plan_capacity(opts, f, &r));
    out.push_back(r);
  }
  *rows = std::move(out);
  return Status::Ok();
}

Status parse_memory_size(std::string_view text, int64_t* bytes) {
  if (bytes == nullptr) return invalid("parse_memory_size: output pointer is null");
  double v = 0;
  std::string unit;
  if (!split_number(text, &v, &unit)) {
    return invalid("memory size '" + std::string(text) + "' is not a non-negative number with a unit (80GB, 80GiB)");
  }
  double scale = 0;
  if (unit.empty() || unit == "gb" || unit == "g")
    scale = 1e9;
  else if (unit == "gib" || unit == "gi")
    scale = 1073741824.0;
  else if (unit == "mb" || unit == "m")
    scale = 1e6;
  else if (unit == "mib" || unit == "mi")
    scale = 1048576.0;
  else if (unit == "tb" || unit == "t")
    scale = 1e12;
  else if (unit == "tib" || unit == "ti")
    scale = 1099511627776.0;
  else if (unit == "b")
    scale = 1;
  else {
    return invalid("memory size '" + std::string(text) + "' has an unknown unit '" + unit +
                   "' (GB = 10^9 bytes, GiB = 2^30 bytes; also MB, MiB, TB, TiB, B)");
  }
  const long double b = (long double)v * scale;
  if (b >= 9.0e18L) return invalid("memory size '" + std::string(text) + "' is too large");
  *bytes = static_cast<int64_t>(b);
  return Status::Ok();
}

Status parse_param_count(std::string_view text, int64_t* params) {
  if (params == nullptr) return invalid("parse_param_count: output pointer is null");
  double v = 0;
  std::string unit;
  if (!split_number(text, &v, &unit)) {
    return invalid("parameter count '" + std::string(text) + "' is not a number (70B, 135M, 6.74e9)");
  }
  double scale = 0;
  if (unit.empty())
    scale = 1;
  else if (unit == "b")
    scale = 1e9;
  else if (unit == "m")
    scale = 1e6;
  else if (unit == "k")
    scale = 1e3;
  else if (unit == "t")
    scale = 1e12;
  else {
    return invalid("parameter count '" + std::string(text) + "' has an unknown suffix '" + unit +
                   "' (B = 10^9, M = 10^6, K = 10^3, T = 10^12)");
  }
  const long double p = std::round((long double)v * scale);
  if (p < 1 || p >= 9.0e18L) return invalid("parameter count '" + std::string(text) + "' is out of range");
  *params = static_cast<int64_t>(p);
  return Status::Ok();
}

}  // namespace qdec
