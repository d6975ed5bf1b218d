// A cached cuBLASLt 16-bit GEMM: D[M, N] (row-major, ld ldd) = X[M, K] (row-major, ld ldx) . W[N, K]^T with
// fp32 accumulation. Used by the large-M path of qdec::gemm (W = the dequantized scratch) and by the benchmark
// as the cuBLAS BF16 peer. Handles and the heuristic's algorithm are cached per device and shape.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "qdec/status.h"

namespace qdec::wq {

// a_bf16: X and W in bf16 (else fp16). d_dtype: GemmDType of D (bf16, fp16, fp32).
Status cublaslt_gemm(bool a_bf16, int d_dtype, int m, int n, int k, const void* x, long long ldx, const void* w,
                     void* d, long long ldd, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Workspace handed to cuBLASLt by the large-M path.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

}  // namespace qdec::wq
