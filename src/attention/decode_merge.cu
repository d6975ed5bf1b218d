// Merge of split-K decode partials: for each (sequence, query head), combine num_splits normalized partial
// outputs part_o[s] with weights exp2(part_lse[s] - max) (log2 domain), then write O in the query dtype and
// the natural-log LSE. Empty splits carry lse = -inf and weigh nothing.
//   part_o   [rows, num_splits, head_dim] float      rows = batch * num_qo_heads
//   part_lse [rows, num_splits] float
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/decode_merge.h"
#include "runtime/cuda_check.h"

namespace qdec::attention {

__global__ void decode_merge_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* o,
                                    float* lse, int num_splits, int head_dim, int q_is_fp16) {
  const size_t row = blockIdx.x;
  const int d = threadIdx.x;
  const float* lse_row = part_lse + row * num_splits;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, lse_row[s]);
  float sum = 0.f, acc = 0.f;
  for (int s = 0; s < num_splits; ++s) {
    const float l = lse_row[s];
    if (l == -INFINITY) continue;
    const float w = exp2f(l - m);
    sum += w;
    if (d < head_dim) acc += w * part_o[(row * num_splits + s) * head_dim + d];
  }
  if (d < head_dim) {
    const float out = acc / sum;
    if (q_is_fp16) reinterpret_cast<__half*>(o)[row * head_dim + d] = __float2half_rn(out);
    else reinterpret_cast<__nv_bfloat16*>(o)[row * head_dim + d] = __float2bfloat16_rn(out);
  }
  if (lse && d == 0) lse[row] = (m + log2f(sum)) * 0.69314718055994531f;
}

Status launch_decode_merge(const float* part_o, const float* part_lse, void* o, float* lse, int rows,
                           int num_splits, int head_dim, bool q_is_fp16, cudaStream_t stream) {
  decode_merge_kernel<<<rows, head_dim, 0, stream>>>(part_o, part_lse, o, lse, num_splits, head_dim,
                                                    q_is_fp16 ? 1 : 0);
  return cuda_status(cudaGetLastError(), "decode_merge_kernel launch");
}

}  // namespace qdec::attention
