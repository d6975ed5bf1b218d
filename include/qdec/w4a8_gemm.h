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
#include "qdec/w8a8_gemm.h"

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

// Paths (docs/int8_w4a8.md). kTokens8 .. kTokens128: the W4A8 kernel, tokens per CTA tile; every one covers any M
// (token tiles repeat). kDequantW8A8 (prefill): the packed weights are first dequantized into int8 scratch in the
// workspace ((q - z) * s1, exact by the protective range; qoq-c: q - z), then w8a8_gemm runs on them with s0 (qoq-c:
// s) as its channel scales: the same int32 sums, one more pass over the weights (N x K / 2 bytes read, N x K
// written), the W8A8 kernels' tensor-core rate. kAuto picks by M; the others force one (tests, measurements).
// kWgmma64 / 128 / 256 (sm_90a): the W4A8 kernel on warpgroup tensor cores (wgmma with the dequantized weights as
// the register A operand), 128 channels x 64 / 128 / 256 tokens per CTA; kUnsupported elsewhere.
enum class W4A8Path : uint8_t {
  kAuto = 0,
  kTokens8,
  kTokens16,
  kTokens32,
  kTokens64,
  kTokens128,
  kDequantW8A8,
  kWgmma64,
  kWgmma128,
  kWgmma256,
};
inline constexpr W4A8Path kW4A8Paths[] = {
    W4A8Path::kAuto,      W4A8Path::kTokens8,     W4A8Path::kTokens16, W4A8Path::kTokens32, W4A8Path::kTokens64,
    W4A8Path::kTokens128, W4A8Path::kDequantW8A8, W4A8Path::kWgmma64,  W4A8Path::kWgmma128, W4A8Path::kWgmma256};
const char* w4a8_path_name(W4A8Path p);

// Smallest M for which kAuto takes kDequantW8A8; below it the W4A8 kernel: kTokens8 / 16 / 32 for M <= 8 / 16 / 32,
// else kTokens64 (up to two 64-token tiles; kTokens128 is never automatic). From the H200 table in
// docs/int8_w4a8.md (session 11, per-split partials and the one-wave split planner), both schemes: at M = 128 the
// kernel (t64) was faster than the dequantize path on 6 of 7 shapes, at M = 192 (three tiles, as from 129) slower on
// 5 of 7, at M >= 384 slower on every shape (the path 1.13x-1.99x faster than the best kernel configuration).
inline constexpr int kW4A8AutoDequantMinM = 129;
// On sm_90 kAuto takes the wgmma kernel instead, for weights (N x K elements) of at least kW4A8AutoWgmmaMinWeights128
// at M in (16, 256] and kW4A8AutoWgmmaMinWeights256 above (H200, both schemes, docs/int8_w4a8.md). Since session 21
// its split-K partials add up in thread block clusters, and (bench_int8, two rounds, 7 shapes): kWgmma64 at M in
// (32, 64] (qoq-c 1.05x-1.44x faster than t64 at M = 48 / 64, 28672 x 4096 at M = 64 31.6 us against 39.9; qoq-g128
// up to 4% slower on 8192 x 8192 and 4096 x 14336) and at M in (16, 32] for weights of at least
// kW4A8AutoWgmma32MinWeights, or kW4A8AutoWgmma32MinWeightsChannel for qoq-c (session 25, after session 24's X ring
// per warpgroup; M = 24 / 32 against t32: qoq-c 1.05x-1.19x faster on the H200 from 6144 x 4096 up, on the H100
// 0.97x on 6144 x 4096, 1.01x on 8192 x 3584, 1.05-1.08x on 4096 x 14336 and 8192 x 8192; qoq-g128 1.03x-1.13x
// faster on the H200 but 0.95x-0.97x on the H100 below 8192 x 8192, 1.0x there; 28672 x 4096 1.3-1.5x on both;
// 4096 x 4096 t32 5-7% faster for qoq-g128 on the H200); kWgmma128 at M in (64, 128]
// (1.15x-2.3x faster than t64 at M = 96 / 128, now on 1280 x 8192 too) and at M in (128, 256] where N <
// kW4A8AutoWgmma256MinN (1280 x 8192 at M = 192 / 256: 1.07x-1.15x faster than the dequantize path), kWgmma256 from
// that N (1.02x-1.12x faster than kWgmma128 on 6144 x 4096, 8192 x 3584, 8192 x 8192 and 28672 x 4096 at M = 192 /
// 256); M in [257, kW4A8AutoWgmmaMaxM], kWgmma256 (sessions 12-13: M = 1024 1.04x-1.22x faster than the dequantize
// path on 4 of 6 shapes, within 1.2% on the other two; at M = 4096 the dequantize path is 1-24% faster for qoq-g128,
// kWgmma256 3-6% faster for qoq-c on 6 of 7). The smallest shape measured is 1280 x 8192 (10 Mi weights).
inline constexpr long long kW4A8AutoWgmmaMinWeights128 = 10LL << 20;  // 1280 x 8192 and up (session 20: 16 Mi)
inline constexpr long long kW4A8AutoWgmmaMinWeights256 = 16LL << 20;  // 4096 x 4096 and up
inline constexpr int kW4A8AutoWgmmaMaxM = 2048;
inline constexpr int kW4A8AutoWgmma256MinN = 6144;                          // M in (128, 256] (session 20: 16384)
inline constexpr long long kW4A8AutoWgmma32MinWeights = 64LL << 20;         // kWgmma64 from M = 17 (8192 x 8192 up)
inline constexpr long long kW4A8AutoWgmma32MinWeightsChannel = 28LL << 20;  // qoq-c (8192 x 3584 up)

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
  int num_splits = 0;               // added: 0 = automatic split-K count, >= 1 forces it (clamped to K / 64);
                                    // kDequantW8A8: W8A8Params::num_splits of its w8a8_gemm
  W8A8Backend w8a8_backend = W8A8Backend::kAuto;  // kDequantW8A8: the backend of its w8a8_gemm
};

// Workspace bytes of the call. The W4A8 kernels (mma and wgmma paths) need them only with split-K: tile tickets in the
// state zone (qdec/workspace.h), each split's int32 partial sums past it.
// kDequantW8A8 needs the int8 weights (N x K) and scales past the state zone and its w8a8_gemm's workspace, and a
// 256-byte aligned buffer.
Status w4a8_gemm_workspace_bytes(const W4A8Params& p, size_t* bytes);
// Added: the configuration and split-K count a call would use, after validation (workspace not checked); for
// kDequantW8A8 the split count and (if w8a8_backend is not null) the backend of its w8a8_gemm.
Status w4a8_gemm_plan(const W4A8Params& p, W4A8Path* path, int* num_splits, W8A8Backend* w8a8_backend = nullptr);
// Validate, then launch on `stream`. On error nothing is launched.
Status w4a8_gemm(const W4A8Params& p, cudaStream_t stream);

}  // namespace qdec
