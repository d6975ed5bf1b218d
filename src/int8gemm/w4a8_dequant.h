// The first step of W4A8Path::kDequantW8A8 (w4a8_gemm.cu): prepacked QoQ weights (w4a8_layout.h) -> int8 [N, K]
// row-major, w8 = (q - z) * s1 (qoq-g) or q - z (qoq-c), exact by the protective range, plus the fp32 channel scales
// [N] (s0, or qoq-c's s). The second step is w8a8_gemm on them: its int32 sums equal the W4A8 kernel's, and its
// epilogue (fp32(acc) * s_x) * s applies the same scales.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "int8gemm/w4a8_layout.h"
#include "qdec/status.h"

namespace qdec::w4a8 {

// `data` is the packed weight of `lay` on the device; `q` ([lay.n, lay.k], 16-byte aligned) and `scales` ([lay.n])
// are written. Launches one grid-stride kernel on `stream`.
Status dequantize_to_int8(const PackedLayout& lay, const void* data, int8_t* q, float* scales, cudaStream_t stream);

}  // namespace qdec::w4a8
