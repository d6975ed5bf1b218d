// Device helpers of the non-fused paths: dequantization of a packed weight to a dense 16-bit [N, K] scratch
// (the large-M path hands it to cuBLASLt), the bias/clamp epilogue over Y, and the convolution's im2col and
// NHWC -> NCHW output transpose. Launchers in gemm.cu and conv.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "qdec/status.h"

namespace qdec::wq {

struct DequantParams {
  const uint8_t* codes;
  const uint8_t* meta;
  void* out;  // [n, k] row-major, bf16 or fp16
  int n, k, n_pad, k_pad;
  int row_begin, row_end;  // rows [row_begin, row_end) of W (row_begin a multiple of 16) -> out rows 0..
  int bits;                // 4 or 8
  int group_k;             // per channel: k
  int zero_point;          // int4: zero point instead of offset
  int out_bf16;
};

// One warp per unit of 4 tiles of one row block, a lane's 16 bytes of codes per tile -> 32 (int4) or 16 (int8)
// values w = q * s + o (fp32 FMA), one rounding to 16 bits. InvalidArgument (naming the value) for a bad layout,
// row range (row_begin a multiple of 16, row_end <= n), a group that is neither K nor a power of two, or nulls.
Status launch_dequant(const DequantParams& p, cudaStream_t stream);

// y[m, n] = act(y[m, n] + bias[n]) in place (y_dtype: GemmDType).
Status launch_bias_act(void* y, long long ldy, int m, int n, int y_dtype, const float* bias, int act,
                       cudaStream_t stream);

}  // namespace qdec::wq
