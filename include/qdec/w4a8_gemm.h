// W4A8 GEMM with QServe's QoQ weights (issue 5): Y[M, N] = dequant(Xq)[M, K] . dequant(W)[N, K]^T (+ bias),
// int8 activations per token (qdec/int8_gemm.h), uint4 weights turned into int8 in registers feeding INT8
// tensor cores, int32 accumulation. Two weight schemes (qdec/int8_quant.h is their CPU ground truth):
//   group_size 128 (or 32 / 64)  progressive: int8 within [-119, 119] per channel (fp16 s0), then per group uint4
//                                with a uint8 scale s1 and uint4 zero z: w8 = (q - z) * s1, Y = acc * s_x * s0
//   group_size 0                 per channel: uint4 + uint4 zero + fp16 scale, Y = s_x * s * (acc - z * row_sum)
// The prepack reorders the codes offline into the layout the kernel reads (docs/formats.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "qdec/gemm.h"
#include "qdec/int8_gemm.h"
#include "qdec/int8_quant.h"
#include "qdec/status.h"

namespace qdec {

// Prepacked weights, host side: copy `data` to the device (16-byte aligned) and describe it by a W4A8WeightView.
struct W4A8Packed {
  int n = 0, k = 0;
  int group_size = 0;  // 32, 64, 128: progressive group scheme; 0: per channel
  std::vector<uint8_t> data;
};
Status w4a8_prepack(const QoQGroupWeights& w, W4A8Packed* out);
Status w4a8_prepack(const QoQChannelWeights& w, W4A8Packed* out);

struct W4A8WeightView {
  int n = 0, k = 0, group_size = 0;
  const void* data = nullptr;  // W4A8Packed::data on the device
  size_t bytes = 0;            // its size (validated against n, k, group_size)
};

// Kernel configurations (docs/int8_w4a8.md): tokens per CTA tile. kAuto picks by M; the others force one (tests,
// measurements). Every configuration covers any M (token tiles repeat).
enum class W4A8Path : uint8_t { kAuto = 0, kTokens8, kTokens16, kTokens32, kTokens64, kTokens128 };
const char* w4a8_path_name(W4A8Path p);

struct W4A8Params {
  Int8ActivationsView x;  // x.k == w.k; row_sum required for group_size 0
  W4A8WeightView w;
  const float* bias = nullptr;           // optional [N] fp32
  GemmDType y_dtype = GemmDType::kBF16;  // bf16, fp16 or fp32
  void* y = nullptr;                     // [M, ldy]
  long long ldy = 0;                     // >= N; 0 means N
  void* workspace = nullptr;             // w4a8_gemm_workspace_bytes(); zero-filled once after allocation;
                                         // shareable with the other GEMM calls (qdec/workspace.h)
  size_t workspace_bytes = 0;
  W4A8Path path = W4A8Path::kAuto;  // added: force a configuration
  int num_splits = 0;               // added: 0 = automatic split-K count, >= 1 forces it (clamped to K / 64)
};

Status w4a8_gemm_workspace_bytes(const W4A8Params& p, size_t* bytes);
// Added: the configuration and split-K count a call would use, after validation (workspace not checked).
Status w4a8_gemm_plan(const W4A8Params& p, W4A8Path* path, int* num_splits);
// Validate, then launch on `stream`. On error nothing is launched.
Status w4a8_gemm(const W4A8Params& p, cudaStream_t stream);

}  // namespace qdec
