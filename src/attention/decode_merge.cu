// Merge of split-K decode partials: for each (sequence, query head), combine num_splits normalized partial
// outputs part_o[s] with weights exp2(part_lse[s] - max) (log2 domain), then write O in the query dtype and
// the natural-log LSE. Empty splits carry lse = -inf and weigh nothing.
//   part_o   [rows, num_splits, head_dim] float      rows = batch * num_qo_heads
//   part_lse [rows, num_splits] float
// Two kernels: one warp per row for up to kRowSplits splits, one CTA per row above.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "attention/decode_merge.h"
#include "attention/decode_timeline.cuh"
#include "runtime/cuda_check.h"
#include "runtime/ptx.cuh"

namespace qdec::attention {

constexpr int kMergeWarps = 8;

// Stores dims 4 * lane .. + 3 of a merged row, acc / sum, in the query dtype.
__device__ __forceinline__ void store_dims4(void* o, size_t row, int head_dim, int lane, float4 acc, float sum,
                                            int q_is_fp16) {
  const float inv = 1.f / sum;
  const float out[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
  const size_t base = row * head_dim + 4 * lane;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (q_is_fp16)
      reinterpret_cast<__half*>(o)[base + k] = __float2half_rn(out[k]);
    else
      reinterpret_cast<__nv_bfloat16*>(o)[base + k] = __float2bfloat16_rn(out[k]);
  }
}

// One CTA of 8 warps per row; warp w sums splits w, w + 8, ... Each warp loads its splits' partial rows (lane = 4
// dims) into registers, kChunkSplits splits of the row at a time, and the row's lse values alongside them: one L2
// round trip after the wait. (The kernel used to load the lse values, reduce them across the CTA and only then
// request the partials.) Every warp computes the row's max and weight sum by shuffles itself, so the only block
// barrier is the final sum of the 8 warps.
constexpr int kChunkSplits = 32;  // one lse value per lane; 4 float4 per lane in flight

__global__ void __launch_bounds__(kMergeWarps * 32)
    decode_merge_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* o, float* lse,
                        int num_splits, int head_dim, int q_is_fp16) {
  decode_stamp(kDecTlEntry);  // probe builds only (QDEC_DECODE_TIMELINE)
  decode_stamp(kDecTlSm);
  [[maybe_unused]] const DecodeStampAtExit stamp_exit;
  // Launched as a programmatic dependent of the attention kernel: wait until its partials are complete.
  ptx::griddep_wait();
  decode_stamp(kDecTlReady);
  constexpr int kPerWarp = kChunkSplits / kMergeWarps;
  __shared__ float4 acc_s[kMergeWarps][32];
  const size_t row = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vecs = head_dim / 4;  // float4 per split row
  const float4* src = reinterpret_cast<const float4*>(part_o + row * num_splits * head_dim) + lane;
  const float* lse_row = part_lse + row * num_splits;

  float m = -INFINITY, sum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int c0 = 0; c0 < num_splits; c0 += kChunkSplits) {
    float4 v[kPerWarp];
#pragma unroll
    for (int j = 0; j < kPerWarp; ++j) {
      const int s = c0 + warp + kMergeWarps * j;
      v[j] = lane < vecs && s < num_splits ? src[static_cast<size_t>(s) * vecs] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const float l = c0 + lane < num_splits ? lse_row[c0 + lane] : -INFINITY;
    if (c0 == 0) {  // the row's max over every split
      m = l;
      for (int s = kChunkSplits + lane; s < num_splits; s += 32) m = fmaxf(m, lse_row[s]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    }
    const float e = l == -INFINITY ? 0.f : exp2f(l - m);  // an empty split's partial is 0 and weighs nothing
    sum += e;
#pragma unroll
    for (int j = 0; j < kPerWarp; ++j) {
      const float w = __shfl_sync(0xffffffffu, e, warp + kMergeWarps * j);
      acc.x += w * v[j].x;
      acc.y += w * v[j].y;
      acc.z += w * v[j].z;
      acc.w += w * v[j].w;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if constexpr (QDEC_DECODE_TIMELINE) {  // thread 0's partials summed (the asm orders them before the stamp)
    asm volatile("" ::"f"(acc.x), "f"(sum));
    decode_stamp(kDecTlFirst);
  }
  acc_s[warp][lane] = acc;
  __syncthreads();
  decode_stamp(kDecTlLoopEnd);
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
    store_dims4(o, row, head_dim, lane, t, sum, q_is_fp16);
  }
  if (lse && threadIdx.x == 0) lse[row] = (m + log2f(sum)) * 0.69314718055994531f;
}

// Few splits (<= kRowSplits): one warp per row, 8 rows per CTA, no block barrier.
// The warp copies its row's partials (lane = 4 dims) into shared memory with cp.async, so that all of them are
// in flight at once (plain loads into registers were each moved next to their first use by ptxas: one L2
// round trip per split), computes the weights from the lse values by shuffles meanwhile, then sums. With many
// splits one CTA of 8 warps per row (above) keeps more loads in flight per row and spreads the rows over 8x the
// CTAs. Measured (H200, A/B in one call, this kernel up to 12 splits): 2-4 splits faster (B = 128: 2 / 4 splits
// -2.0..-2.7%; int4 B = 256, 2 splits: -3%; SmolLM2, 2 splits: -1..-1.7%), 8 splits slower (int4 B = 32: 256
// rows in 32 CTAs, +4.9%; B = 64 +1%).
constexpr int kRowSplits = 4;

__global__ void __launch_bounds__(kMergeWarps * 32)
    decode_merge_rows_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* o, float* lse,
                             int rows, int num_splits, int head_dim, int q_is_fp16) {
  decode_stamp(kDecTlEntry);  // probe builds only (QDEC_DECODE_TIMELINE)
  decode_stamp(kDecTlSm);
  [[maybe_unused]] const DecodeStampAtExit stamp_exit;
  ptx::griddep_wait();
  decode_stamp(kDecTlReady);
  extern __shared__ float4 stage_s[];  // [warp][num_splits][32]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const size_t row = static_cast<size_t>(blockIdx.x) * kMergeWarps + warp;
  if (row >= static_cast<size_t>(rows)) return;
  const int vecs = head_dim / 4;  // float4 per split row
  float4* my = stage_s + warp * num_splits * 32;
  if (lane < vecs) {
    const float4* src = reinterpret_cast<const float4*>(part_o + row * num_splits * head_dim) + lane;
    for (int s = 0; s < num_splits; ++s) ptx::cp_async16(my + s * 32 + lane, src + static_cast<size_t>(s) * vecs);
  }
  asm volatile("cp.async.commit_group;\n" ::);
  const float l = lane < num_splits ? part_lse[row * num_splits + lane] : -INFINITY;
  float m = l;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  const float w = l == -INFINITY ? 0.f : exp2f(l - m);  // an empty split's partial is 0 and weighs nothing
  float sum = w;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // each lane reads back only its own copies
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < num_splits; ++s) {
    const float ws = __shfl_sync(0xffffffffu, w, s);
    if (lane < vecs) {
      const float4 v = my[s * 32 + lane];
      acc.x += ws * v.x;
      acc.y += ws * v.y;
      acc.z += ws * v.z;
      acc.w += ws * v.w;
    }
  }
  if (lane < vecs) store_dims4(o, row, head_dim, lane, acc, sum, q_is_fp16);
  if (lse && lane == 0) lse[row] = (m + log2f(sum)) * 0.69314718055994531f;
}

Status decode_timeline_merge(bool reset, std::vector<unsigned long long>* out) {
  return decode_timeline_io(reset, out);
}

bool decode_timeline_built() {
  return QDEC_DECODE_TIMELINE != 0;
}

Status decode_timeline(bool reset, std::vector<unsigned long long>* att, std::vector<unsigned long long>* merge) {
  Status (*const units[])(bool, std::vector<unsigned long long>*) = {decode_timeline_16bit, decode_timeline_fp8,
                                                                     decode_timeline_int8, decode_timeline_int4};
  if (reset) {
    for (auto* unit : units) QDEC_RETURN_IF_ERROR(unit(true, nullptr));
    return decode_timeline_merge(true, nullptr);
  }
  if (att == nullptr || merge == nullptr) return Status(StatusCode::kInvalidArgument, "decode_timeline: null output");
  att->assign(size_t(kDecTlCtas) * kDecTlSlots, 0);
  std::vector<unsigned long long> one;
  for (auto* unit : units) {  // one unit's kernel ran: the others' tables are all zero
    QDEC_RETURN_IF_ERROR(unit(false, &one));
    for (size_t i = 0; i < one.size(); ++i) (*att)[i] = std::max((*att)[i], one[i]);
  }
  return decode_timeline_merge(false, merge);
}

Status launch_decode_merge(const float* part_o, const float* part_lse, void* o, float* lse, int rows, int num_splits,
                           int head_dim, bool q_is_fp16, cudaStream_t stream) {
  // Programmatic dependent launch: the merge grid is launched while the attention grid drains, hiding the
  // launch latency that dominates small (tens of microseconds) decode steps.
  const int fp16 = q_is_fp16 ? 1 : 0;
  if (num_splits <= kRowSplits) {
    const LaunchConfig cfg(dim3((rows + kMergeWarps - 1) / kMergeWarps), dim3(kMergeWarps * 32),
                           static_cast<size_t>(kMergeWarps) * num_splits * 32 * sizeof(float4), stream,
                           /*programmatic=*/true);
    return cuda_status(cudaLaunchKernelEx(cfg.get(), decode_merge_rows_kernel, part_o, part_lse, o, lse, rows,
                                          num_splits, head_dim, fp16),
                       "decode_merge_rows_kernel launch");
  }
  const LaunchConfig cfg(dim3(rows), dim3(kMergeWarps * 32), 0, stream, /*programmatic=*/true);
  return cuda_status(
      cudaLaunchKernelEx(cfg.get(), decode_merge_kernel, part_o, part_lse, o, lse, num_splits, head_dim, fp16),
      "decode_merge_kernel launch");
}

}  // namespace qdec::attention
