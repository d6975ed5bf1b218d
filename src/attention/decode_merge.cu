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

// One CTA (head_dim threads) per row. The split weights are computed once, in parallel, into shared memory;
// the weighted sum then issues its independent partial loads back to back (a serial per-split loop with a
// dependent max and exp per split was latency-bound: 27 us for 60 splits).
__global__ void decode_merge_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* o,
                                    float* lse, int num_splits, int head_dim, int q_is_fp16) {
  // Launched as a programmatic dependent of the attention kernel: wait until its partials are complete.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  extern __shared__ float w_s[];  // [num_splits]
  __shared__ float red_s[32];
  const size_t row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const float* lse_row = part_lse + row * num_splits;

  float m = -INFINITY;
  for (int s = tid; s < num_splits; s += blockDim.x) m = fmaxf(m, lse_row[s]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (lane == 0) red_s[warp] = m;
  __syncthreads();
  m = red_s[0];
  for (int w = 1; w < nwarps; ++w) m = fmaxf(m, red_s[w]);
  __syncthreads();

  float sum = 0.f;
  for (int s = tid; s < num_splits; s += blockDim.x) {
    const float l = lse_row[s];
    const float w = l == -INFINITY ? 0.f : exp2f(l - m);
    w_s[s] = w;
    sum += w;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) red_s[warp] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < nwarps; ++w) sum += red_s[w];

  if (tid < head_dim) {
    const float* src = part_o + row * num_splits * head_dim + tid;
    float acc = 0.f;
#pragma unroll 8
    for (int s = 0; s < num_splits; ++s) acc += w_s[s] * src[(size_t)s * head_dim];  // weight 0: empty split
    const float out = acc / sum;
    if (q_is_fp16) reinterpret_cast<__half*>(o)[row * head_dim + tid] = __float2half_rn(out);
    else reinterpret_cast<__nv_bfloat16*>(o)[row * head_dim + tid] = __float2bfloat16_rn(out);
  }
  if (lse && tid == 0) lse[row] = (m + log2f(sum)) * 0.69314718055994531f;
}

Status launch_decode_merge(const float* part_o, const float* part_lse, void* o, float* lse, int rows,
                           int num_splits, int head_dim, bool q_is_fp16, cudaStream_t stream) {
  // Programmatic dependent launch: the merge grid is launched while the attention grid drains, hiding the
  // launch latency that dominates small (tens of microseconds) decode steps.
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(rows);
  cfg.blockDim = dim3(head_dim);
  cfg.dynamicSmemBytes = static_cast<size_t>(num_splits) * sizeof(float);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const int fp16 = q_is_fp16 ? 1 : 0;
  return cuda_status(
      cudaLaunchKernelEx(&cfg, decode_merge_kernel, part_o, part_lse, o, lse, num_splits, head_dim, fp16),
      "decode_merge_kernel launch");
}

}  // namespace qdec::attention
