// float64 CPU reference for decode attention, computed on dequantized K/V (so a kernel's error is judged
// apart from the format's). Two passes per (sequence, query head): max of the scaled scores, then the
// normalized weighted sum of V.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "qdec/attention.h"

namespace qdec {

void decode_attention_reference(int batch, int num_qo_heads, int num_kv_heads, int head_dim, int t_max, double sm_scale,
                                const double* q, const double* k, const double* v, const int32_t* seq_lens, double* o,
                                double* lse) {
  const int group_size = num_qo_heads / num_kv_heads;
  std::vector<double> scores;
  for (int b = 0; b < batch; ++b) {
    const int len = seq_lens[b];
    scores.assign(static_cast<size_t>(len), 0.0);
    for (int qh = 0; qh < num_qo_heads; ++qh) {
      const int kvh = qh / group_size;
      const double* qv = q + (static_cast<size_t>(b) * num_qo_heads + qh) * head_dim;
      double m = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < len; ++t) {
        const double* kv = k + ((static_cast<size_t>(b) * t_max + t) * num_kv_heads + kvh) * head_dim;
        double dot = 0.0;
        for (int d = 0; d < head_dim; ++d) dot += qv[d] * kv[d];
        scores[t] = dot * sm_scale;
        m = std::max(m, scores[t]);
      }
      double sum = 0.0;
      double* ov = o + (static_cast<size_t>(b) * num_qo_heads + qh) * head_dim;
      std::fill(ov, ov + head_dim, 0.0);
      for (int t = 0; t < len; ++t) {
        const double w = std::exp(scores[t] - m);
        sum += w;
        const double* vv = v + ((static_cast<size_t>(b) * t_max + t) * num_kv_heads + kvh) * head_dim;
        for (int d = 0; d < head_dim; ++d) ov[d] += w * vv[d];
      }
      for (int d = 0; d < head_dim; ++d) ov[d] /= sum;
      if (lse) lse[static_cast<size_t>(b) * num_qo_heads + qh] = m + std::log(sum);
    }
  }
}

}  // namespace qdec
