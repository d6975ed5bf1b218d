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

constexpr int kMergeWarps = 8;

// One CTA of 8 warps per row. The split weights are computed once, in parallel, into shared memory; then
// warp w sums splits w, w+8, ... with 16-byte loads (lane = 4 dims), so ~num_splits/8 independent loads per
// lane are in flight instead of num_splits dependent ones (a per-thread serial loop over 60 splits took
// 11-27 us), and the 8 warp sums are added through shared memory.
__global__ void __launch_bounds__(kMergeWarps * 32)
    decode_merge_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* o, float* lse,
                        int num_splits, int head_dim, int q_is_fp16) {
  // Launched as a programmatic dependent of the attention kernel: wait until its partials are complete.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  extern __shared__ float w_s[];  // [num_splits]
  __shared__ float red_s[kMergeWarps];
  __shared__ float4 acc_s[kMergeWarps][32];
  const size_t row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* lse_row = part_lse + row * num_splits;

  float m = -INFINITY;
  for (int s = tid; s < num_splits; s += blockDim.x) m = fmaxf(m, lse_row[s]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (lane == 0) red_s[warp] = m;
  __syncthreads();
  m = red_s[0];
#pragma unroll
  for (int w = 1; w < kMergeWarps; ++w) m = fmaxf(m, red_s[w]);
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
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) sum += red_s[w];

  const int vecs = head_dim / 4;  // float4 per split row
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lane < vecs) {
    const float4* src = reinterpret_cast<const float4*>(part_o + row * num_splits * head_dim) + lane;
#pragma unroll 4
    for (int s = warp; s < num_splits; s += kMergeWarps) {  // weight 0: empty split (its partial is 0)
      const float w = w_s[s];
      const float4 v = src[(size_t)s * vecs];
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  acc_s[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && lane < vecs) {
    float4 t = acc_s[0][lane];
#pragma unroll
    for (int w = 1; w < kMergeWarps; ++w) {
      const float4 u = acc_s[w][lane];
      t.x += u.x;
      t.y += u.y;
      t.z += u.z;
      t.w += u.w;
    }
    const float inv = 1.f / sum;
    const float out[4] = {t.x * inv, t.y * inv, t.z * inv, t.w * inv};
    const size_t base = row * head_dim + 4 * lane;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (q_is_fp16)
        reinterpret_cast<__half*>(o)[base + k] = __float2half_rn(out[k]);
      else
        reinterpret_cast<__nv_bfloat16*>(o)[base + k] = __float2bfloat16_rn(out[k]);
    }
  }
  if (lse && tid == 0) lse[row] = (m + log2f(sum)) * 0.69314718055994531f;
}

Status launch_decode_merge(const float* part_o, const float* part_lse, void* o, float* lse, int rows, int num_splits,
                           int head_dim, bool q_is_fp16, cudaStream_t stream) {
  // Programmatic dependent launch: the merge grid is launched while the attention grid drains, hiding the
  // launch latency that dominates small (tens of microseconds) decode steps.
  const LaunchConfig cfg(dim3(rows), dim3(kMergeWarps * 32), static_cast<size_t>(num_splits) * sizeof(float), stream,
                         /*programmatic=*/true);
  const int fp16 = q_is_fp16 ? 1 : 0;
  return cuda_status(
      cudaLaunchKernelEx(cfg.get(), decode_merge_kernel, part_o, part_lse, o, lse, num_splits, head_dim, fp16),
      "decode_merge_kernel launch");
}

}  // namespace qdec::attention
