// Weight-only quantized GEMM/GEMV and convolution.
//
//   Y[M, N] = clamp(X[M, K] . dequant(W)[N, K]^T + bias[N])
//     X     bf16 or fp16, row-major with leading dimension ldx (elements)
//     W     a packed weight on the device (qdec/weight_formats.h, docs/formats.md)
//     bias  optional fp32 [N]
//     Y     bf16, fp16 or fp32, row-major with leading dimension ldy
//   fp32 accumulation. Paths (docs/gemm.md):
//     kFused          tensor-core kernel with in-register dequantization, M <= 64 (split-K over the SMs)
//     kDequantCublas  dequantize W to a bf16/fp16 scratch in the workspace, then cuBLASLt (large M)
//     kWgmma          sm_90a, every weight format: the weights dequantized in registers as wgmma's A operand, X by
//                     the TMA
//     kAuto           kWgmma where it runs (sm_90a device and code, X and meta 16-byte aligned, ldx % 8 == 0) and
//                     was measured faster (M >= 24; wgmma_auto_wins below), else kFused for M <= kAutoFusedMaxM
//                     (32) and kDequantCublas above
//
// Conv2d: input NCHW fp32/fp16, weights [Co, Kh, Kw, Ci] packed with groups along Ci (quantize_conv_weights),
// output NCHW in the input's dtype; im2col into the workspace, then the GEMM above (docs/gemm.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "qdec/status.h"
#include "qdec/weight_formats.h"
#include "qdec/workspace.h"

typedef struct CUstream_st* cudaStream_t;

namespace qdec {

enum class GemmDType : uint8_t { kBF16 = 0, kFP16, kFP32 };
const char* gemm_dtype_name(GemmDType d);

enum class Activation : uint8_t { kNone = 0, kReLU, kReLU6 };
const char* activation_name(Activation a);

enum class GemmPath : uint8_t { kAuto = 0, kFused, kDequantCublas, kWgmma };
const char* gemm_path_name(GemmPath p);

// How the fused kernel stages X in shared memory: the CTA's whole K slice in its prologue (kSlice), or through a
// ring of two slots of one ring block per K part each (kRing: 256 K values for int4, 128 for int8), refilled as
// the warps stream their weight tiles, so that shared memory does not grow with the slice. kRing needs M <= 16 and
// 16-byte X rows (K % 8 == 0, ldx % 8 == 0, X 16-byte aligned); with several K parts per CTA, every part of every
// K slice must hold the same number of weight tiles in whole groups (else InvalidArgument naming num_parts and K).
// kAuto weighs both stagings where they can run.
enum class GemmXStaging : uint8_t { kAuto = 0, kSlice, kRing };
const char* gemm_x_staging_name(GemmXStaging s);

// Largest M the fused kernel takes.
constexpr int kFusedMaxM = 64;
// Largest M for which kAuto picks the fused kernel where the wgmma rule below does not take the call (measured on the
// H200, docs/gemm.md: above it the dequantize + cuBLASLt path is faster); kFusedMaxM stays the fused path's limit
// when it is asked for explicitly.
constexpr int kAutoFusedMaxM = 32;
// Where kAuto picks the wgmma path, for int4 and int8 weights alike (both measured on the H200 with session 43's
// split-K epilogue, docs/gemm.md "Session 43" under "The wgmma path"), by M and the weights (N x K):
//   M in [kAutoWgmmaMinM, kAutoWgmmaTinyMaxM]      with >= kAutoWgmmaMinWeightsTinyM weights (over the fused kernel
//                                                    up to kAutoFusedMaxM, over the dequantize path above),
//   M <= kAutoWgmmaSmallMaxM                        with >= kAutoWgmmaMinWeightsSmallM, or >= kAutoWgmmaMinWeightsTinyM
//                                                    and K >= kAutoWgmmaSmallMinK (session 44: on 4-7 Mi weights with
//                                                    K >= 3072 the wgmma path took 0.79-0.97x the dequantize path's
//                                                    time at M = 72-128, 6 shapes; with K <= 2048 0.95-1.11x, 6),
//   M <= kAutoWgmmaMidMaxM                          with >= kAutoWgmmaMinWeightsMidM,
//   M <= kAutoWgmmaMaxM                             with >= kAutoWgmmaMinWeights,
// and, given the device's SM count, M in (kAutoWgmmaMidMaxM, kAutoWgmmaMaxM] with >= kAutoWgmmaOneWaveMinWeights
// weights and K >= kAutoWgmmaOneWaveMinK whose 256-token tiles (ceil(M / 256) x ceil(N / 128)) fit one wave of the
// SMs: there the kernel runs in one wave (split-K fills it), while the dequantize path's time grows with M. Elsewhere
// kAuto takes the fused kernel up to kAutoFusedMaxM and the dequantize path above.
constexpr int kAutoWgmmaMinM = 24;
constexpr int kAutoWgmmaTinyMaxM = 64;
constexpr long long kAutoWgmmaMinWeightsTinyM = 4LL << 20;
constexpr int kAutoWgmmaSmallMaxM = 128;
constexpr long long kAutoWgmmaMinWeightsSmallM = 8LL << 20;
constexpr long long kAutoWgmmaSmallMinK = 3072;
constexpr int kAutoWgmmaMidMaxM = 192;
constexpr long long kAutoWgmmaMinWeightsMidM = 10LL << 20;
constexpr int kAutoWgmmaMaxM = 1024;
constexpr long long kAutoWgmmaMinWeights = 28LL << 20;
constexpr long long kAutoWgmmaOneWaveMinWeights = 16LL << 20;
constexpr long long kAutoWgmmaOneWaveMinK = 4096;
constexpr bool wgmma_auto_wins(int m, long long n, long long k, int sm_count = 0) {
  const long long w = n * k;
  if (m < kAutoWgmmaMinM || m > kAutoWgmmaMaxM) return false;
  if ((m <= kAutoWgmmaTinyMaxM && w >= kAutoWgmmaMinWeightsTinyM) ||
      (m <= kAutoWgmmaSmallMaxM &&
       (w >= kAutoWgmmaMinWeightsSmallM || (w >= kAutoWgmmaMinWeightsTinyM && k >= kAutoWgmmaSmallMinK))) ||
      (m <= kAutoWgmmaMidMaxM && w >= kAutoWgmmaMinWeightsMidM) || w >= kAutoWgmmaMinWeights)
    return true;
  if (sm_count <= 0 || m <= kAutoWgmmaMidMaxM || w < kAutoWgmmaOneWaveMinWeights || k < kAutoWgmmaOneWaveMinK)
    return false;
  return (m + 255LL) / 256 * ((n + 127) / 128) <= sm_count;
}

// The wgmma path's token tile when GemmParams::tile_m is 0: the smallest of 64, 128 and 256 that holds M, except 64
// at M >= kAutoTile64MinM (up to 128) for weights (N x K) of at most kAutoTile64MaxWeights, and from
// kAutoTile64MinMLarger for at most kAutoTile64MaxWeightsLarger. Measured on the H200 (docs/gemm.md "Session 44",
// int4 and int8): at M = 96-128 the 64-token CTAs (two token tiles) took 0.80-1.00x the 128-token time on 7 shapes of
// 4-12 Mi weights (1280 x 4096 up to 1.02x at M = 96-104); on the two of 16 Mi 1.01-1.05x at M = 96-104 and 0.95-1.00x
// at 112-128; on 20 Mi and more 1.03-1.52x at M = 128. At M = 72-80 they were faster on 3 of the 7 small shapes and
// slower on 4 (up to 1.10x).
constexpr int kAutoTile64MinM = 96;
constexpr long long kAutoTile64MaxWeights = 12LL << 20;
constexpr int kAutoTile64MinMLarger = 105;
constexpr long long kAutoTile64MaxWeightsLarger = 16LL << 20;
constexpr int wgmma_auto_tile_m(int m, long long n, long long k) {
  if (m <= 64) return 64;
  if (m > 128) return 256;
  const long long w = n * k;
  return (m >= kAutoTile64MinM && w <= kAutoTile64MaxWeights) ||
                 (m >= kAutoTile64MinMLarger && w <= kAutoTile64MaxWeightsLarger)
             ? 64
             : 128;
}

// A packed weight on the device.
struct WeightView {
  WeightLayout layout;
  const void* codes = nullptr;  // layout.code_bytes(), 16-byte aligned
  const void* meta = nullptr;   // layout.meta_bytes(), 4-byte aligned (16 for the wgmma path)
};

struct GemmParams {
  int m = 0;
  GemmDType x_dtype = GemmDType::kBF16;  // bf16 or fp16
  GemmDType y_dtype = GemmDType::kBF16;  // bf16, fp16 or fp32
  const void* x = nullptr;               // [m, ldx]
  long long ldx = 0;                     // >= K; 0 means K
  WeightView w;                          // N = w.layout.n, K = w.layout.k
  const float* bias = nullptr;           // optional [N]
  Activation act = Activation::kNone;
  void* y = nullptr;  // [m, ldy]
  long long ldy = 0;  // >= N; 0 means N
  GemmPath path = GemmPath::kAuto;
  int num_splits = 0;  // fused path: 0 = automatic, >= 1 forces the split-K count
  // Fused path: 0 = automatic, 1 / 2 / 4 / 8 forces the K parts per CTA (each CTA then covers 128 / num_parts
  // output channels of one K slice, its parts added in shared memory; > 1 needs M <= 32).
  int num_parts = 0;
  GemmXStaging x_staging = GemmXStaging::kAuto;  // fused path, M <= 16 (above: always the slice)
  // Fused path: weight tiles (512 bytes) in flight per warp. 0 = automatic: 8 (the deep ring) for int8 weights at
  // M <= 8 where every warp streams >= 24 tiles and the deeper ring keeps the plan's CTAs per SM, else 4; 4 forces
  // the 4-tile ring, 8 the deep one (int8 at M <= 8 only, else InvalidArgument).
  int weight_ring = 0;
  // Fused path: launch as a programmatic dependent (CUDA PDL), so that the kernel's CTAs start, and request W
  // and its scales, while the previous kernel of the stream is still finishing; X, Y, bias and the workspace are
  // read or written only after that kernel has completed. So W must not be written by the kernel launched just
  // before. The dequantize + cuBLASLt and wgmma paths ignore it.
  bool pdl = false;
  // Wgmma path: tokens per CTA, 0 = automatic (wgmma_auto_tile_m), else 64, 128 or 256 (num_splits forces its split-K
  // count too).
  int tile_m = 0;
  // Device workspace, gemm_workspace_bytes() of it, 256-byte aligned. Zero-fill it once after allocating it
  // (cudaMemset): the split-K semaphores must start at zero; every call leaves them zero again. One buffer of the
  // largest size can serve every call and path (qdec/workspace.h: scratch never enters the split-K state zone).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of workspace the call needs (depends on the path that M selects, the split count, and the shapes).
Status gemm_workspace_bytes(const GemmParams& p, size_t* bytes);
// The path kAuto resolves to, the split count (fused and wgmma paths), K parts per CTA, X staging and weight tiles in
// flight per warp (1, 1, kAuto and 0 for the other paths), and the wgmma path's token tile (else 0), after
// validation. Null outputs are skipped.
Status gemm_plan(const GemmParams& p, GemmPath* path, int* num_splits, int* num_parts = nullptr,
                 GemmXStaging* x_staging = nullptr, int* weight_ring = nullptr, int* tile_m = nullptr);
// Validate, then launch on `stream`. On error nothing is launched.
Status gemm(const GemmParams& p, cudaStream_t stream);

// ---- Convolution ------------------------------------------------------------------------------------------
struct Conv2dParams {
  int batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int out_channels = 0, kernel_h = 0, kernel_w = 0;
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  GemmDType dtype = GemmDType::kFP32;  // input and output: fp32 or fp16
  const void* input = nullptr;         // [batch, in_channels, in_h, in_w]
  WeightView w;                        // from quantize_conv_weights: N = out_channels, K = kh * kw * in_channels
  const float* bias = nullptr;         // optional [out_channels]
  Activation act = Activation::kNone;
  void* output = nullptr;  // [batch, out_channels, out_h, out_w]
  GemmPath path = GemmPath::kAuto;
  void* workspace = nullptr;  // conv2d_workspace_bytes(); zero-filled once after allocation (as for gemm)
  size_t workspace_bytes = 0;

  int out_h() const { return (in_h + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) / stride_h + 1; }
  int out_w() const { return (in_w + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) / stride_w + 1; }
};

Status conv2d_workspace_bytes(const Conv2dParams& p, size_t* bytes);
// The path conv2d's im2col GEMM takes (M = batch x out_h x out_w, K = kernel_h x kernel_w x in_channels), as gemm_plan
// reports it; the same validation as conv2d_workspace_bytes (the workspace need not be set).
Status conv2d_gemm_path(const Conv2dParams& p, GemmPath* path);
Status conv2d(const Conv2dParams& p, cudaStream_t stream);

// Quantize conv weights [Co, Ci, Kh, Kw] (fp32, PyTorch order): reordered to [Co, Kh, Kw, Ci] so that groups
// run along Ci, then quantize_weights with N = Co, K = Kh * Kw * Ci. Groups must divide Ci (per channel: any).
Status quantize_conv_weights(const float* w, int co, int ci, int kh, int kw, const WeightFormat& format,
                             PackedWeights* out);

// ---- CPU references ---------------------------------------------------------------------------------------
// float64: y[m, n] = act(sum_k x[m, k] * w[n, k] + bias[n]); x [m, k], w [n, k] (dequantized), bias optional.
void gemm_reference(int m, int n, int k, const double* x, const double* w, const double* bias, Activation act,
                    double* y);
// Direct float64 convolution: x NCHW, w [Co, Ci, Kh, Kw] (dequantized, PyTorch order), y NCHW.
void conv2d_reference(const Conv2dParams& shape, const double* x, const double* w, const double* bias, double* y);

}  // namespace qdec
