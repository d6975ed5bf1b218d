// Activation-quantized formats: the CPU ground truth of the INT8 tensor-core GEMMs (issue 5). docs/formats.md,
// "W4A8 (QoQ) and W8A8 formats", is the specification of every formula and byte below; this header names them.
//
//   activations  per token (row) symmetric int8, fp32 scale, int32 row sums; optionally fused after RMSNorm
//   w8           per output channel symmetric int8, fp32 scale                      Y = acc * s_x * s_w
//   int8 blocks  per K-block (32/64/128) asymmetric int8, fp32 scale and offset, both operands (seed 003),
//                combined through per-block row/column sums of the codes
//   qoq-g        QServe's progressive group quantization: per channel int8 in [-119, 119] (fp16 scale s0),
//                then per group of K (128) uint4 with a uint8 scale s1 and a uint4 zero z: w8 = (q - z) * s1
//   qoq-c        per channel uint4 with a fp16 scale and uint4 zero: the zero term goes to the epilogue (X 1_k)
//
// The *_reference GEMMs compute, in float64, exactly what a kernel computes: int32 sums of int8 products (exact),
// then the scales. Y is [M, N] row-major, X is [M, K], W is [N, K] (N output channels, K the reduction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "qdec/status.h"

namespace qdec {

// Largest K of the int32-accumulating references: 131072 * 127 * 128 < 2^31.
inline constexpr int kInt8GemmMaxK = 131072;
// QServe's protective range: int8 intermediates of qoq-g lie in [-119, 119], so that (q - z) * s1 <= 127.
inline constexpr int kQoQProtectiveMax = 119;

// ---- Activations: per-token dynamic symmetric int8 ---------------------------------------------------------------
struct Int8Activations {
  int m = 0, k = 0;
  std::vector<int8_t> q;         // [m, k] codes in -127..127
  std::vector<float> scale;      // [m] fp32: s = amax / 127 (0 for an all-zero row)
  std::vector<int32_t> row_sum;  // [m] sum of the row's codes (the X 1_k of the zero-point algebra, in codes)
};

// x: [m, k] row-major fp32 (or bf16 bits). s = fp32(amax / 127) over the finite values; q = clamp(rint(x / s),
// -127, 127) with x / s an IEEE fp32 division; NaN -> 0, +-Inf -> +-127; s == 0 -> all codes 0.
Status quantize_activations_int8(const float* x, int m, int k, Int8Activations* out);
Status quantize_activations_int8_bf16(const uint16_t* x_bits, int m, int k, Int8Activations* out);

// RMSNorm then the quantizer above: ms = fp32(ss / k), r = 1 / sqrt(ms + eps) in fp32, y = (x * r) * weight[k] in fp32
// (two roundings, that order). y_out (optional, [m, k]) receives y. The sum of squares ss is float64 over the row's
// chunks of 8 elements (the last one shorter), each chunk's part an fp32 chain p = fma(x7, x7, ... fma(x1, x1, x0 *
// x0)) (one rounding per step), or, where p is not finite, the chunk's float64 sum ((x0^2 + x1^2) + x2^2) + ... (so a
// finite x keeps its float64 square, and a non-finite x gives a non-finite ss). The order of the chunks' float64 sum is
// not specified (the GPU kernels add them in their own order): it is exact, so order-free, while the parts span fewer
// than about 29 - log2(k / 8) binades. eps must be finite and >= 0. A row holding a non-finite x gives a non-finite ms;
// the quantizer rules then apply.
Status rmsnorm_quantize_int8(const float* x, const float* weight, int m, int k, float eps, Int8Activations* out,
                             float* y_out = nullptr);
Status rmsnorm_quantize_int8_bf16(const uint16_t* x_bits, const uint16_t* weight_bits, int m, int k, float eps,
                                  Int8Activations* out, float* y_out = nullptr);

// x = q * s, exactly (double). out: [m, k].
void dequantize_activations_f64(const Int8Activations& x, double* out);

// ---- W8A8 per output channel ----------------------------------------------------------------------------------------
struct Int8ChannelWeights {
  int n = 0, k = 0;
  std::vector<int8_t> q;     // [n, k] codes in -127..127
  std::vector<float> scale;  // [n] fp32: s = amax / 127
};

// w: [n, k] fp32. The quantizer of the activations, per output channel; non-finite weights are an error.
Status quantize_int8_channels(const float* w, int n, int k, Int8ChannelWeights* out);
void dequantize_int8_channels_f64(const Int8ChannelWeights& w, double* out);  // q * s, [n, k]

// y[m, n] = double(acc) * s_x[m] * s_w[n] (+ bias[n]), acc = sum_k x.q[m, k] * w.q[n, k] in int32.
// acc_out (optional, [m, n]) receives the int32 sums. bias may be null.
Status w8a8_gemm_reference(const Int8Activations& x, const Int8ChannelWeights& w, const float* bias, double* y,
                           int32_t* acc_out = nullptr);

// ---- W8A8 per K-block, both operands (seed 003) --------------------------------------------------------------------
// Each row's K is cut into blocks of `block` (32, 64, 128; K a multiple of it); value = s * q + o per block.
struct Int8BlockQuant {
  int rows = 0, k = 0, block = 0;
  std::vector<int8_t> q;           // [rows, k] codes in -128..127
  std::vector<float> scale;        // [rows, num_blocks] fp32
  std::vector<float> offset;       // [rows, num_blocks] fp32
  std::vector<int32_t> block_sum;  // [rows, num_blocks] sum of the block's codes
  int num_blocks() const { return block > 0 ? k / block : 0; }
};

// x: [rows, k] fp32. Per block, over the finite values: lo = min, hi = max; s = fp32((hi - lo) / 255),
// o = fp32(lo + fp32(128 * s)); q = clamp(rint(fp32(x - o) / s), -128, 127); s == 0 (a constant block, or no
// finite value) -> o = lo (0 if none), codes 0. NaN -> 0, +Inf -> 127, -Inf -> -128.
Status quantize_int8_blocks(const float* x, int rows, int k, int block, Int8BlockQuant* out);
void dequantize_int8_blocks_f64(const Int8BlockQuant& x, double* out);  // s * q + o, [rows, k]

// a: [m, k] (activations), b: [n, k] (weights), the same block. Per block i of length L:
//   y += sA*sB*C_i + sA*oB*SA_i + oA*sB*SB_i + L*oA*oB
// with C_i the int32 block dot product and SA_i, SB_i the block sums of codes; then + bias[n]. Float64.
Status w8a8_block_gemm_reference(const Int8BlockQuant& a, const Int8BlockQuant& b, const float* bias, double* y);

// ---- W4A8: QoQ progressive group quantization ---------------------------------------------------------------------
// Packed form (docs/formats.md): codes [n, k / 2] bytes, column 2j in the low nibble of byte j and 2j + 1 in the
// high nibble; group scales [n, G] uint8 (G = k / group_size); group zeros [n, ceil(G / 2)] bytes, nibble-packed
// as the codes; channel scales [n] fp16 bits.
struct QoQGroupWeights {
  int n = 0, k = 0, group_size = 128;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> group_scales;
  std::vector<uint8_t> group_zeros;
  std::vector<uint16_t> channel_scales;

  int num_groups() const { return group_size > 0 ? k / group_size : 0; }
  int code(int row, int col) const;  // 0..15
  int scale(int row, int group) const { return group_scales[static_cast<size_t>(row) * num_groups() + group]; }
  int zero(int row, int group) const;  // 0..15
};

// Step 1: per channel symmetric int8 within the protective range. s0 = fp16sat(amax / 119) (computed in fp32),
// q8 = clamp(rint(w / s0), -119, 119) (fp32 division); s0 == 0 -> codes 0. q8: [n, k]; s0_bits: [n] fp16.
// Non-finite weights, or a scale above the fp16 maximum, are an error naming the row.
Status qoq_quantize_int8_channels(const float* w, int n, int k, int8_t* q8, uint16_t* s0_bits);

// Step 2: per group (32, 64, 128; K a multiple of it) asymmetric uint4 of int8 codes, in exact integer
// arithmetic: lo = min(min q8, 0), hi = max(max q8, 0); s1 = max(1, ceil((hi - lo) / 15));
// z = rint(-lo / s1); q = clamp(rint(q8 / s1) + z, 0, 15) (rint: ties to even). Any int8 input is accepted
// (QServe's overflow example needs 120); only codes within [-119, 119] are guaranteed to dequantize into int8.
Status qoq_quantize_int8_groups(const int8_t* q8, const uint16_t* s0_bits, int n, int k, int group_size,
                                QoQGroupWeights* out);

// Both steps from fp32 weights [n, k].
Status qoq_quantize_weights(const float* w, int n, int k, int group_size, QoQGroupWeights* out);

// The kernel's int8 operand (q - z) * s1, exactly, as int32 (may leave int8 for codes outside the protective
// range). out: [n, k].
void qoq_dequantize_int32(const QoQGroupWeights& w, int32_t* out);
// The same into int8; InvalidArgument naming (row, col) and the value if one does not fit (the overflow QServe's
// protective range prevents). out is fully written either way (out-of-range values wrap).
Status qoq_dequantize_int8(const QoQGroupWeights& w, int8_t* out);
// (q - z) * s1 * s0, exactly. out: [n, k].
void qoq_dequantize_f64(const QoQGroupWeights& w, double* out);

// y[m, n] = double(acc) * s_x[m] * s0[n] (+ bias[n]), acc = sum_k x.q[m, k] * ((q - z) * s1)[n, k] in int32.
Status w4a8_group_gemm_reference(const Int8Activations& x, const QoQGroupWeights& w, const float* bias, double* y);

// ---- W4A8 per channel ----------------------------------------------------------------------------------------------
// codes [n, k / 2] as QoQGroupWeights; scales [n] fp16 bits; zeros [n] bytes (uint4 in the low nibble).
struct QoQChannelWeights {
  int n = 0, k = 0;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;

  int code(int row, int col) const;  // 0..15
};

// Per channel, fp32 arithmetic: lo = min(min w, 0), hi = max(max w, 0); s = fp16sat((hi - lo) / 15);
// z = clamp(rint(-lo / s), 0, 15); q = clamp(rint(w / s) + z, 0, 15); s == 0 -> z = 0, codes 0. K must be even.
// Non-finite weights, or a scale above the fp16 maximum, are an error naming the row.
Status qoq_quantize_channels(const float* w, int n, int k, QoQChannelWeights* out);
void qoq_channel_dequantize_int8(const QoQChannelWeights& w, int8_t* out);  // q - z in -15..15, [n, k]
void qoq_channel_dequantize_f64(const QoQChannelWeights& w, double* out);   // (q - z) * s, [n, k]

// The epilogue form: y[m, n] = s_x[m] * s[n] * double(acc - z[n] * row_sum[m]) (+ bias[n]),
// acc = sum_k x.q[m, k] * q[n, k] over the raw uint4 codes, in int32.
Status w4a8_channel_gemm_reference(const Int8Activations& x, const QoQChannelWeights& w, const float* bias, double* y);

}  // namespace qdec
