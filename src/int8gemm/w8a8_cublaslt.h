// cuBLASLt int8 x int8 -> int32 GEMM with cached handle, descriptors and algorithm: the kCublasLt backend of
// qdec::w8a8_gemm (followed by qdec's epilogue kernel) and the benchmark's raw "cuBLASLt INT8" peer.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "qdec/status.h"

namespace qdec::w8a8 {

// D[M, N] (row-major, ld ldd) = X[M, K] (ld ldx) . W[N, K]^T (ld ldw), int32. cuBLASLt's IMMA kernels want K,
// the leading dimensions and the pointers 4- / 16-byte friendly: the callers pass multiples of 16.
Status cublaslt_s8_gemm(int m, int n, int k, const int8_t* x, long long ldx, const int8_t* w, long long ldw, int32_t* d,
                        long long ldd, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Workspace handed to cuBLASLt by the kCublasLt backend.
constexpr size_t kLtWorkspaceBytes = size_t(16) << 20;

}  // namespace qdec::w8a8
