// Activation quantization on the GPU (issue 5): the layer in front of the INT8 tensor-core GEMMs
// (qdec/w8a8_gemm.h, qdec/w4a8_gemm.h). Every kernel is bit-exact with its CPU ground truth in qdec/int8_quant.h
// (docs/formats.md, "W4A8 (QoQ) and W8A8 formats"); docs/int8_gemm.md describes the kernels and their speed.
//
//   quantize_activations   X [m, ldx] bf16/fp16 -> q [m, ldq] int8, scale [m] fp32, row_sum [m] int32
//                          (per token, dynamic, symmetric: quantize_activations_int8(_bf16))
//   rmsnorm_quantize       RMSNorm(X) * weight, then the quantizer above, fused (rmsnorm_quantize_int8(_bf16))
//   quantize_blocks        seed 003's per-K-block asymmetric quantizer (quantize_int8_blocks): q [rows, ldq],
//                          scale, offset, block_sum [rows, k / block]
//
// Aligned rows (X 16-byte aligned, ldx and K multiples of 8) with K <= kActQuantRegisterMaxK stream through a
// resident grid, each row read once and the next row's loads in flight; other rows run one CTA per row (element
// loads where unaligned; larger K re-reads the row from L2). Both are bit-exact. Codes in [k, ldq) are not written.
#pragma once

#include <cstdint>

#include "qdec/gemm.h"
#include "qdec/int8_gemm.h"
#include "qdec/status.h"

namespace qdec {

// Largest K whose row is held in registers (one pass over X); above it the kernels read X twice (three times
// for the RMSNorm), the later passes from L2.
inline constexpr int kActQuantRegisterMaxK = 16384;
// Largest K the kernels accept (the GEMMs' limit, kInt8GemmMaxK in qdec/int8_quant.h).
inline constexpr int kActQuantMaxK = 131072;

struct ActQuantParams {
  int m = 0, k = 0;
  GemmDType x_dtype = GemmDType::kBF16;  // bf16 or fp16 (fp16 follows the float version of the quantizer)
  const void* x = nullptr;               // [m, ldx]
  long long ldx = 0;                     // >= k; 0 means k
  int8_t* q = nullptr;                   // [m, ldq], 16-byte aligned
  long long ldq = 0;                     // >= k and a multiple of 16; 0 means k (then k must be a multiple of 16)
  float* scale = nullptr;                // [m]
  int32_t* row_sum = nullptr;            // [m]; may be null
  // Launch as a programmatic dependent (CUDA PDL): the CTAs start, and rmsnorm_quantize stages its weight, while
  // the previous kernel of the stream is still finishing; X is read and the outputs written only after that
  // kernel has completed. So the weight must not be written by the kernel launched just before. Only the
  // streaming kernel (aligned rows, K a multiple of 8 and <= kActQuantRegisterMaxK) uses it; the one-CTA-per-row
  // kernel launches as usual.
  bool pdl = false;

  // The GEMMs' view of the output.
  Int8ActivationsView view() const { return Int8ActivationsView{m, k, q, ldq ? ldq : k, scale, row_sum}; }
};

// Validate, then launch on `stream`. On error nothing is launched.
Status quantize_activations(const ActQuantParams& p, cudaStream_t stream);

// RMSNorm then the quantizer: ms = fp32(ss / k), r = 1 / sqrt(ms + eps) in fp32, y = (x * r) * weight in fp32, with
// ss the float64 sum of the row's 8-element chunks' fp32 FMA chains of squares (rmsnorm_quantize_int8 in
// qdec/int8_quant.h specifies it). The kernels add the chunks' parts in their own float64 order: equal to the CPU's
// whenever every partial sum is exact (docs/int8_gemm.md says when they round, and how rarely that reaches the fp32
// ms).
struct RmsNormQuantParams {
  ActQuantParams out;            // m, k, x_dtype, x, ldx, and the outputs as above
  const void* weight = nullptr;  // [k] RMSNorm gain, in x_dtype
  float eps = 1e-6f;             // finite, >= 0
};
Status rmsnorm_quantize(const RmsNormQuantParams& p, cudaStream_t stream);

// Seed 003's per-block quantizer: each row's K is cut into blocks of `block` (32, 64, 128; K a multiple of it).
struct BlockQuantParams {
  int rows = 0, k = 0, block = 0;
  GemmDType x_dtype = GemmDType::kBF16;  // bf16, fp16 or fp32
  const void* x = nullptr;               // [rows, ldx]
  long long ldx = 0;                     // >= k; 0 means k
  int8_t* q = nullptr;                   // [rows, ldq], 16-byte aligned
  long long ldq = 0;                     // >= k and a multiple of 16; 0 means k
  float* scale = nullptr;                // [rows, k / block]
  float* offset = nullptr;               // [rows, k / block]
  int32_t* block_sum = nullptr;          // [rows, k / block]
};
Status quantize_blocks(const BlockQuantParams& p, cudaStream_t stream);

}  // namespace qdec
