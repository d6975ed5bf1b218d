// Types shared by the INT8 tensor-core path (issue 5): the activation quantization kernels
// (qdec/act_quant.h) write an Int8ActivationsView, the W8A8 (qdec/w8a8_gemm.h) and W4A8 (qdec/w4a8_gemm.h)
// GEMMs read it. The CPU ground truth of every format is qdec/int8_quant.h (docs/formats.md, "W4A8 (QoQ) and
// W8A8 formats").
#pragma once

#include <cstdint>

namespace qdec {

// Per-token (row) symmetric int8 activations on the device: x[m, k] ~= q[m, k] * scale[m].
struct Int8ActivationsView {
  int m = 0, k = 0;
  const int8_t* q = nullptr;           // [m, ldq] codes in -127..127, rows 16-byte aligned
  long long ldq = 0;                   // elements between rows, >= k and a multiple of 16; 0 means k
  const float* scale = nullptr;        // [m] fp32
  const int32_t* row_sum = nullptr;    // [m] sum of the row's codes (zero-point terms); null where unused
};

}  // namespace qdec
