// Token sampling: greedy, temperature and nucleus (top-p). See qdec/model.h.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "qdec/model.h"

namespace qdec {

Status validate_sampler_options(const SamplerOptions& opts) {
  if (!(opts.temperature >= 0.0f) || !std::isfinite(opts.temperature)) {
    return Status(StatusCode::kInvalidArgument,
                  "temperature " + std::to_string(opts.temperature) + " must be a finite value >= 0");
  }
  if (!(opts.top_p > 0.0f && opts.top_p <= 1.0f)) {
    return Status(StatusCode::kInvalidArgument, "top_p " + std::to_string(opts.top_p) + " must be in (0, 1]");
  }
  return Status::Ok();
}

int32_t argmax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

std::vector<std::pair<int32_t, float>> sampling_distribution(const float* logits, int n, float temperature,
                                                             float top_p) {
  std::vector<std::pair<int32_t, float>> p(static_cast<size_t>(n));
  float mx = -INFINITY;
  for (int i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    const float e = std::exp((logits[i] - mx) / temperature);
    p[static_cast<size_t>(i)] = {i, e};
    sum += e;
  }
  // Stable, so equal probabilities keep token order.
  std::stable_sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t keep = 0;
  double cum = 0.0;
  while (keep < p.size()) {
    cum += p[keep].second / sum;
    ++keep;
    if (cum >= double(top_p)) break;
  }
  p.resize(keep);
  for (auto& e : p) e.second = float(e.second / cum / sum);
  return p;
}

int32_t Sampler::sample(const float* logits, int n) {
  if (opts_.temperature == 0.0f) return argmax(logits, n);
  const auto dist = sampling_distribution(logits, n, opts_.temperature, opts_.top_p);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cum = 0.0;
  for (const auto& [id, prob] : dist) {
    cum += prob;
    if (u < cum) return id;
  }
  return dist.back().first;
}

}  // namespace qdec
