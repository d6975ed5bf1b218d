// Tests of the CPU ground truth of the KV-cache formats (include/qdec/formats.h, docs/formats.md).
//
// The CUDA headers are included here only, as the oracle for the conversions: their host code paths are
// the reference implementation of __float2bfloat16_rn, __float2half_rn and __nv_cvt_float_to_fp8.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "qdec/formats.h"
#include "qdec/status.h"
#include "test_util.h"

namespace qdec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t fbits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// ---- CUDA oracles -----------------------------------------------------------------------------------

uint16_t cuda_bf16(float x) {
  return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
}
uint16_t cuda_fp16(float x) {
  return __half_raw(__float2half_rn(x)).x;
}
// CUDA has no host satfinite float->half; the spec defines it as the RNE result with +-Inf clamped.
uint16_t cuda_fp16_satfinite(float x) {
  const uint16_t h = cuda_fp16(x);
  return (h & 0x7FFF) == 0x7C00 ? static_cast<uint16_t>((h & 0x8000) | 0x7BFF) : h;
}
uint8_t cuda_fp8(float x, KvKind kind) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind == KvKind::kFP8E4M3 ? __NV_E4M3 : __NV_E5M2);
}
float cuda_fp8_to_float(uint8_t b, KvKind kind) {
  if (kind == KvKind::kFP8E4M3) {
    __nv_fp8_e4m3 v;
    v.__x = b;
    return static_cast<float>(v);
  }
  __nv_fp8_e5m2 v;
  v.__x = b;
  return static_cast<float>(v);
}

// Inputs for the conversion sweeps (about 3 million floats): strided and random bit patterns, every
// bf16/fp16/fp8 rounding midpoint with its float neighbours, the saturation thresholds and special values.
std::vector<float> conversion_inputs(uint64_t seed) {
  std::vector<uint32_t> bits;
  bits.reserve(3'500'000);
  // Every 65536th pattern, with the low half at the bf16 rounding boundaries.
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) bits.push_back(hi << 16 | lo);
  }
  // A prime stride through all patterns reaches every exponent and mixed low-order bits.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) bits.push_back(static_cast<uint32_t>(u));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 1'000'000; ++i) bits.push_back(static_cast<uint32_t>(rng()));

  auto push_around = [&](double v) {
    const uint32_t m = fbits(static_cast<float>(v));  // midpoints of 11-bit values are exact in float
    for (int d = -2; d <= 2; ++d) {
      bits.push_back(m + d);
      bits.push_back((m + d) ^ 0x80000000u);
    }
  };
  // fp16: every code's midpoint to the next code (the one past 65504 is 65536, the overflow boundary).
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = fp16_bits_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7C00 ? 65536.0 : fp16_bits_to_float(static_cast<uint16_t>(h + 1));
    push_around(lo);
    push_around(0.5 * (lo + hi));
  }
  // fp8: the same for both kinds, including the midpoint past the largest finite value.
  for (KvKind kind : {KvKind::kFP8E4M3, KvKind::kFP8E5M2}) {
    const bool e4m3 = kind == KvKind::kFP8E4M3;
    const int max_code = e4m3 ? 0x7E : 0x7B;
    for (int c = 0; c <= max_code; ++c) {
      const double lo = fp8_bits_to_float(static_cast<uint8_t>(c), kind);
      const double hi = c == max_code ? (e4m3 ? 480.0 : 65536.0) : fp8_bits_to_float(static_cast<uint8_t>(c + 1), kind);
      push_around(lo);
      push_around(0.5 * (lo + hi));
    }
  }
  for (uint32_t u : {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u,
                     0x7FA00000u, 0x7FC00000u, 0x7FC00001u, 0x7FFFFFFFu, 0x33000000u, 0x33000001u, 0x33800000u,
                     0x3A800000u, 0x3A800001u, 0x37000000u, 0x37000001u, 0x477FE000u, 0x477FEFFFu, 0x477FF000u,
                     0x43E80000u, 0x43E80001u, 0x47700000u, 0x476FFFFFu}) {
    bits.push_back(u);
    bits.push_back(u | 0x80000000u);
  }
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(bits[i]);
  return out;
}

const std::vector<float>& sweep_inputs() {
  static const std::vector<float> inputs = conversion_inputs(qdec_test_seed());
  return inputs;
}

// Compares a conversion with its oracle on every sweep input; reports the count and the first mismatches.
template <typename Mine, typename Ref>
void expect_same_conversion(const char* what, Mine mine, Ref ref) {
  const std::vector<float>& xs = sweep_inputs();
  size_t bad = 0;
  for (float x : xs) {
    const unsigned got = mine(x), want = ref(x);
    if (got != want && ++bad <= 5) {
      ADD_FAILURE() << what << "(bits 0x" << std::hex << fbits(x) << " = " << x << "): got 0x" << got << ", CUDA 0x"
                    << want;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": mismatches out of " << xs.size() << " inputs";
}

TEST(Conversions, Bf16MatchesCuda) {
  SCOPED_TRACE(qdec_seed_message());
  expect_same_conversion("bf16", float_to_bf16_bits, cuda_bf16);
}

TEST(Conversions, Fp16MatchesCuda) {
  SCOPED_TRACE(qdec_seed_message());
  expect_same_conversion("fp16", float_to_fp16_bits, cuda_fp16);
  expect_same_conversion("fp16 satfinite", float_to_fp16_bits_satfinite, cuda_fp16_satfinite);
}

TEST(Conversions, Fp8MatchesCuda) {
  SCOPED_TRACE(qdec_seed_message());
  for (KvKind kind : {KvKind::kFP8E4M3, KvKind::kFP8E5M2}) {
    expect_same_conversion(
        kind == KvKind::kFP8E4M3 ? "fp8 e4m3" : "fp8 e5m2", [kind](float x) { return float_to_fp8_bits(x, kind); },
        [kind](float x) { return cuda_fp8(x, kind); });
  }
}

TEST(Conversions, DecodeAllCodesMatchesCuda) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    ASSERT_EQ(fbits(bf16_bits_to_float(h)), fbits(__bfloat162float(__nv_bfloat16(__nv_bfloat16_raw{h}))))
        << "bf16 0x" << std::hex << b;
    ASSERT_EQ(fbits(fp16_bits_to_float(h)), fbits(__half2float(__half(__half_raw{h})))) << "fp16 0x" << std::hex << b;
  }
  for (KvKind kind : {KvKind::kFP8E4M3, KvKind::kFP8E5M2}) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint8_t c = static_cast<uint8_t>(b);
      ASSERT_EQ(fbits(fp8_bits_to_float(c, kind)), fbits(cuda_fp8_to_float(c, kind)))
          << "fp8 kind " << int(kind) << " code 0x" << std::hex << b;
    }
  }
}

// Every non-NaN code survives decode -> encode; NaNs come back as the canonical code.
TEST(Conversions, EncodeOfDecodeIsIdentity) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const bool bf16_nan = (h & 0x7FFF) > 0x7F80, fp16_nan = (h & 0x7FFF) > 0x7C00;
    EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(h)), bf16_nan ? 0x7FFF : h);
    EXPECT_EQ(float_to_fp16_bits(fp16_bits_to_float(h)), fp16_nan ? 0x7FFF : h);
  }
  for (uint32_t b = 0; b < 256; ++b) {
    const uint8_t c = static_cast<uint8_t>(b);
    EXPECT_EQ(float_to_fp8_bits(fp8_bits_to_float(c, KvKind::kFP8E4M3), KvKind::kFP8E4M3),
              (c & 0x7F) == 0x7F ? 0x7F : c);
    const bool e5m2_inf = (c & 0x7F) == 0x7C, e5m2_nan = (c & 0x7F) > 0x7C;
    EXPECT_EQ(float_to_fp8_bits(fp8_bits_to_float(c, KvKind::kFP8E5M2), KvKind::kFP8E5M2), e5m2_nan ? 0x7F
                                                                                           : e5m2_inf
                                                                                               ? (c & 0x80) | 0x7B
                                                                                               : c);
  }
}

// CUDA's NaN results: one canonical code, sign and payload dropped.
TEST(Conversions, NanCodes) {
  for (uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    const float x = from_bits(nan);
    EXPECT_EQ(float_to_bf16_bits(x), 0x7FFF);
    EXPECT_EQ(float_to_fp16_bits(x), 0x7FFF);
    EXPECT_EQ(float_to_fp16_bits_satfinite(x), 0x7FFF);
    EXPECT_EQ(float_to_fp8_bits(x, KvKind::kFP8E4M3), 0x7F);
    EXPECT_EQ(float_to_fp8_bits(x, KvKind::kFP8E5M2), 0x7F);
  }
  EXPECT_EQ(fbits(fp16_bits_to_float(0xFE00)), 0x7FFFFFFFu);
  EXPECT_EQ(fbits(fp8_bits_to_float(0xFF, KvKind::kFP8E4M3)), 0x7FFFFFFFu);
  EXPECT_EQ(fbits(fp8_bits_to_float(0xFD, KvKind::kFP8E5M2)), 0x7FFFFFFFu);
  EXPECT_EQ(fbits(bf16_bits_to_float(0xFFC1)), 0xFFC10000u);  // bf16 decode is a plain shift
}

TEST(Conversions, HandValues) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3F80);      // tie, even stays
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16_bits(-kInf), 0xFF80);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x7F7FFFFF)), 0x7F80);  // FLT_MAX rounds to Inf

  EXPECT_EQ(float_to_fp16_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7C00);  // tie between 65504 and 2^16: even is Inf
  EXPECT_EQ(float_to_fp16_bits(-1e30f), 0xFC00);
  EXPECT_EQ(float_to_fp16_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(0x1p-25f), 0x0000);               // tie to even zero
  EXPECT_EQ(float_to_fp16_bits(from_bits(0x33000001)), 0x0001);  // just above the tie
  EXPECT_EQ(float_to_fp16_bits(-0x1p-26f), 0x8000);
  EXPECT_EQ(float_to_fp16_bits(3 * 0x1p-25f), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_fp16_bits(3.3f), 0x429A);
  EXPECT_EQ(float_to_fp16_bits_satfinite(65520.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits_satfinite(-kInf), 0xFBFF);
  EXPECT_EQ(float_to_fp16_bits_satfinite(3e38f), 0x7BFF);

  const KvKind e4 = KvKind::kFP8E4M3, e5 = KvKind::kFP8E5M2;
  EXPECT_EQ(float_to_fp8_bits(448.0f, e4), 0x7E);
  EXPECT_EQ(float_to_fp8_bits(464.0f, e4), 0x7E);  // tie between 448 and (NaN slot) 480: even 448
  EXPECT_EQ(float_to_fp8_bits(470.0f, e4), 0x7E);  // saturates
  EXPECT_EQ(float_to_fp8_bits(-1e9f, e4), 0xFE);
  EXPECT_EQ(float_to_fp8_bits(kInf, e4), 0x7E);
  EXPECT_EQ(float_to_fp8_bits(0x1p-10f, e4), 0x00);  // half the smallest subnormal: tie to zero
  EXPECT_EQ(float_to_fp8_bits(from_bits(0x3A800001), e4), 0x01);
  EXPECT_EQ(float_to_fp8_bits(-0x1p-10f, e4), 0x80);
  // 7.5 subnormal units: a tie that rounds up to the smallest normal.
  EXPECT_EQ(float_to_fp8_bits(0x1p-6f * 15 / 16, e4), 0x08);
  EXPECT_EQ(float_to_fp8_bits(57344.0f, e5), 0x7B);
  EXPECT_EQ(float_to_fp8_bits(61440.0f, e5), 0x7B);
  EXPECT_EQ(float_to_fp8_bits(-kInf, e5), 0xFB);
  EXPECT_EQ(float_to_fp8_bits(0x1p-17f, e5), 0x00);
  EXPECT_EQ(float_to_fp8_bits(0x1p-16f, e5), 0x01);
  EXPECT_EQ(fp8_bits_to_float(0x7E, e4), 448.0f);
  EXPECT_EQ(fp8_bits_to_float(0x01, e4), 0x1p-9f);
  EXPECT_EQ(fp8_bits_to_float(0x7B, e5), 57344.0f);
  EXPECT_EQ(fp8_bits_to_float(0xFC, e5), -kInf);
}

// ---- Quantizer hand vectors -------------------------------------------------------------------------

std::vector<float> zeros(int n) {
  return std::vector<float>(size_t(n), 0.0f);
}

QuantizedRow quantize(const KvFormat& f, const std::vector<float>& x, const QuantizeOptions& opts = {}) {
  QuantizedRow q;
  quantize_row(f, static_cast<int>(x.size()), x.data(), &q, opts);
  return q;
}

std::vector<double> dequantize(const KvFormat& f, int head_dim, const QuantizedRow& q) {
  std::vector<double> y(static_cast<size_t>(head_dim));
  dequantize_row_f64(f, head_dim, q, y.data());
  return y;
}

TEST(Quantize, Int8ExactScale) {
  // amax 127 gives scale 127/127 = 1 (fp16 0x3C00), so codes are rint(x) with ties to even.
  std::vector<float> x = zeros(64);
  const float in[] = {127, -2, 0.5f, 1.5f, 2.5f, -0.5f, -127, 3.49f, -1.5f, 126.5f};
  std::copy(std::begin(in), std::end(in), x.begin());
  const QuantizedRow q = quantize(KvFormat::int8(0), x);
  EXPECT_EQ(float_to_fp16_bits(q.scale[0]), 0x3C00);
  const uint16_t want[] = {0x7F, 0xFE, 0x00, 0x02, 0x02, 0x00, 0x81, 0x03, 0xFE, 0x7E};
  for (int i = 0; i < 64; ++i) EXPECT_EQ(q.code[i], i < 10 ? want[i] : 0) << "dim " << i;
  const std::vector<double> y = dequantize(KvFormat::int8(0), 64, q);
  const double want_y[] = {127, -2, 0, 2, 2, 0, -127, 3, -2, 126};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(y[i], want_y[i]) << "dim " << i;
}

TEST(Quantize, Int8RoundedScale) {
  // amax 1: 1/127 = 0.0078740 = 2^-7 * 1.0078740; the 10-bit mantissa 8.063 rounds to 8, so
  // s = 2^-7 * (1 + 8/1024) = 0.00787353515625, fp16 0x2008. Then 1/s = 127.008 -> 127,
  // 0.5/s = 63.504 -> 64, 0.25/s = 31.752 -> 32, 0.75/s = 95.256 -> 95.
  std::vector<float> x = zeros(128);
  x[0] = 1;
  x[1] = -1;
  x[2] = 0.5f;
  x[3] = 0.25f;
  x[4] = -0.75f;
  const QuantizedRow q = quantize(KvFormat::int8(0), x);
  EXPECT_EQ(float_to_fp16_bits(q.scale[0]), 0x2008);
  EXPECT_EQ(q.scale[0], 0.00787353515625f);
  EXPECT_EQ(q.code[0], 127);
  EXPECT_EQ(q.code[1], 0x81);
  EXPECT_EQ(q.code[2], 64);
  EXPECT_EQ(q.code[3], 32);
  EXPECT_EQ(q.code[4], 0xA1);  // -95
}

// The quantizers divide (x / s), as the spec says; a kernel that multiplies by a reciprocal differs on
// ties. With s = 7: 45.5 / 7 = 6.5 exactly -> 6 (even), but 45.5 * float(1/7) = 6.5000005 -> 7.
TEST(Quantize, DivisionNotReciprocal) {
  std::vector<float> x = zeros(64);
  x[0] = 889;  // int8: amax 889 -> s = 889 / 127 = 7
  x[1] = 45.5f;
  x[2] = -45.5f;
  QuantizedRow q = quantize(KvFormat::int8(0), x);
  EXPECT_EQ(q.scale[0], 7.0f);
  EXPECT_EQ(q.code[1], 6);
  EXPECT_EQ(q.code[2], 0xFA);  // -6
  x[0] = 105;                  // int4: min 0 (the zeros), max 105 -> s = 7, z = 0
  x[2] = 0;
  q = quantize(KvFormat::int4(1), x);
  EXPECT_EQ(q.scale[0], 7.0f);
  EXPECT_EQ(q.shift[0], 0.0f);
  EXPECT_EQ(q.code[1], 6);
  // fp8: 1.3671875 / 7 = 0.1953125 = 1.5625 * 2^-3, the tie between 0x24 (1.5 * 2^-3, even) and 0x25;
  // the reciprocal product lands just above it.
  QuantizeOptions seven;
  seven.fp8_static_scale = 7.0f;
  x[1] = 1.3671875f;
  q = quantize(KvFormat::fp8_e4m3(), x, seven);
  EXPECT_EQ(q.code[1], 0x24);
}

TEST(Quantize, Int8GroupsWithSpecials) {
  // int8-g32, D=128: group 0 amax 127 (s=1), group 1 amax 254 (s=2), group 2 zeros, group 3 NaN/Inf with
  // finite amax 12.7 -> s = fp16(0.1) = 0x2E66 = 0.0999755859375; 12.7 / s = 127.03 -> 127.
  std::vector<float> x = zeros(128);
  x[0] = 127;
  x[1] = 3;
  x[32] = 254;
  x[33] = 3;   // 1.5 -> 2
  x[34] = 5;   // 2.5 -> 2
  x[35] = -3;  // -1.5 -> -2
  x[36] = -254;
  x[96] = kNaN;
  x[97] = kInf;
  x[98] = -kInf;
  x[99] = 12.7f;
  const QuantizedRow q = quantize(KvFormat::int8(32), x);
  EXPECT_EQ(float_to_fp16_bits(q.scale[0]), 0x3C00);
  EXPECT_EQ(float_to_fp16_bits(q.scale[1]), 0x4000);
  EXPECT_EQ(float_to_fp16_bits(q.scale[2]), 0x0000);
  EXPECT_EQ(float_to_fp16_bits(q.scale[3]), 0x2E66);
  EXPECT_EQ(q.code[0], 127);
  EXPECT_EQ(q.code[1], 3);
  EXPECT_EQ(q.code[32], 127);
  EXPECT_EQ(q.code[33], 2);
  EXPECT_EQ(q.code[34], 2);
  EXPECT_EQ(q.code[35], 0xFE);
  EXPECT_EQ(q.code[36], 0x81);
  EXPECT_EQ(q.code[96], 0);     // NaN
  EXPECT_EQ(q.code[97], 127);   // +Inf
  EXPECT_EQ(q.code[98], 0x81);  // -Inf
  EXPECT_EQ(q.code[99], 127);
  for (int i = 64; i < 96; ++i) EXPECT_EQ(q.code[i], 0);
}

TEST(Quantize, Int4RowWiseWithSpecials) {
  // Finite min -1, max 14: s = 15/15 = 1 (0x3C00), z = -1 (0xBC00), q = rint(x + 1).
  std::vector<float> x = zeros(64);  // zeros -> q = 1
  const float in[] = {-1, 14, 0.5f, 1.5f, 3, kNaN, kInf, -kInf, -0.5f, 6.49f};
  std::copy(std::begin(in), std::end(in), x.begin());
  const QuantizedRow q = quantize(KvFormat::int4(1), x);
  EXPECT_EQ(float_to_fp16_bits(q.scale[0]), 0x3C00);
  EXPECT_EQ(float_to_fp16_bits(q.shift[0]), 0xBC00);
  const uint16_t want[] = {0, 15, 2, 2, 4, 0, 15, 0, 0, 7};
  for (int i = 0; i < 64; ++i) EXPECT_EQ(q.code[i], i < 10 ? want[i] : 1) << "dim " << i;
  const std::vector<double> y = dequantize(KvFormat::int4(1), 64, q);
  const double want_y[] = {-1, 14, 1, 1, 3, -1, 14, -1, -1, 6};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(y[i], want_y[i]) << "dim " << i;
  EXPECT_EQ(y[63], 0.0);
}

TEST(Quantize, Int4Groups) {
  // int4-g4, D=64, groups of 16.
  std::vector<float> x = zeros(64);
  for (int i = 0; i < 16; ++i) x[i] = float(i);  // g0: min 0, max 15 -> s 1, z 0, q = i
  for (int i = 16; i < 32; ++i) x[i] = 3.3f;     // g1: constant -> s 0, z fp16(3.3) = 3.30078125
  for (int i = 48; i < 64; ++i) x[i] = -8;       // g3: min -8, max 22 -> s 2 (0x4000), z -8 (0xC800)
  x[48] = 22;
  x[49] = -7;  // 0.5 -> 0
  x[50] = -5;  // 1.5 -> 2
  x[51] = 0;   // 4
  x[52] = 13;  // 10.5 -> 10
  const QuantizedRow q = quantize(KvFormat::int4(4), x);
  const uint16_t want_s[] = {0x3C00, 0x0000, 0x0000, 0x4000}, want_z[] = {0x0000, 0x429A, 0x0000, 0xC800};
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(float_to_fp16_bits(q.scale[g]), want_s[g]) << "group " << g;
    EXPECT_EQ(float_to_fp16_bits(q.shift[g]), want_z[g]) << "group " << g;
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q.code[i], i);
  for (int i = 16; i < 48; ++i) EXPECT_EQ(q.code[i], 0);
  const uint16_t want_g3[] = {15, 0, 2, 4, 10, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q.code[48 + i], want_g3[i]);
  const std::vector<double> y = dequantize(KvFormat::int4(4), 64, q);
  EXPECT_EQ(y[20], 3.30078125);  // a constant row is exact up to the fp16 rounding of z
  EXPECT_EQ(y[48], 22.0);
  EXPECT_EQ(y[52], 12.0);
}

TEST(Quantize, Fp8E4M3Hand) {
  // amax 448 -> scale 448 / 448 = 1, so codes are the plain conversions.
  std::vector<float> x = zeros(64);
  const float in[] = {448,          1,        -2,   0.5f, 1.0625f, 1.1875f, 0x1p-9f,
                      3 * 0x1p-10f, 0x1p-10f, kNaN, kInf, -kInf,   -0.0f,   15};
  std::copy(std::begin(in), std::end(in), x.begin());
  const QuantizedRow q = quantize(KvFormat::fp8_e4m3(), x);
  EXPECT_EQ(fbits(q.scale[0]), fbits(1.0f));
  const uint16_t want[] = {0x7E, 0x38, 0xC0, 0x30, 0x38, 0x3A, 0x01, 0x02, 0x00, 0x7F, 0x7E, 0xFE, 0x80, 0x57};
  for (int i = 0; i < 14; ++i) EXPECT_EQ(q.code[i], want[i]) << "dim " << i;
  const std::vector<double> y = dequantize(KvFormat::fp8_e4m3(), 64, q);
  EXPECT_TRUE(std::isnan(y[9]));
  EXPECT_EQ(y[10], 448.0);  // +Inf -> largest finite x scale
  EXPECT_EQ(y[11], -448.0);
}

TEST(Quantize, Fp8E5M2Hand) {
  std::vector<float> x = zeros(64);
  const float in[] = {57344, 1, -1.5f, 1.125f, 1.375f, 0x1p-16f, 0x1p-17f, 3 * 0x1p-17f, kNaN, kInf, -kInf};
  std::copy(std::begin(in), std::end(in), x.begin());
  const QuantizedRow q = quantize(KvFormat::fp8_e5m2(), x);
  EXPECT_EQ(fbits(q.scale[0]), fbits(1.0f));
  const uint16_t want[] = {0x7B, 0x3C, 0xBE, 0x3C, 0x3E, 0x01, 0x00, 0x02, 0x7F, 0x7B, 0xFB};
  for (int i = 0; i < 11; ++i) EXPECT_EQ(q.code[i], want[i]) << "dim " << i;
}

TEST(Quantize, Fp8Scales) {
  std::vector<float> x = zeros(128);
  x[0] = 1;
  x[1] = -1;
  x[2] = 0.3f;
  QuantizedRow q = quantize(KvFormat::fp8_e4m3(), x);
  EXPECT_EQ(fbits(q.scale[0]), fbits(1.0f / 448.0f));
  EXPECT_EQ(q.code[0], 0x7E);
  EXPECT_EQ(q.code[1], 0xFE);

  QuantizeOptions plain;
  plain.fp8_static_scale = 1.0f;
  x[3] = 1000;  // saturates under a static scale
  q = quantize(KvFormat::fp8_e4m3(), x, plain);
  EXPECT_EQ(q.scale[0], 1.0f);
  EXPECT_EQ(q.code[0], 0x38);
  EXPECT_EQ(q.code[2], 0x2A);  // 0.3 = 1.2 * 2^-2: mantissa 1.6/8 -> 2, i.e. 0.3125
  EXPECT_EQ(q.code[3], 0x7E);

  QuantizeOptions two;
  two.fp8_static_scale = 2.0f;
  x[4] = 3;  // 3 / 2 = 1.5 = 0x3C
  q = quantize(KvFormat::fp8_e4m3(), x, two);
  EXPECT_EQ(q.scale[0], 2.0f);
  EXPECT_EQ(q.code[4], 0x3C);
}

TEST(Quantize, AllZeroRows) {
  for (const KvFormat& f : all_kv_formats()) {
    SCOPED_TRACE(f.name());
    const QuantizedRow q = quantize(f, zeros(128));
    for (int i = 0; i < 128; ++i) ASSERT_EQ(q.code[i], 0);
    const int groups = kv_groups(f, 128);
    const bool unit_scale = kv_bits(f.kind) == 16 || f.kind == KvKind::kFP8E4M3 || f.kind == KvKind::kFP8E5M2;
    for (int g = 0; g < groups; ++g) {
      EXPECT_EQ(q.scale[g], unit_scale ? 1.0f : 0.0f);
      EXPECT_EQ(fbits(q.shift[g]), 0u);
    }
    for (double v : dequantize(f, 128, q)) ASSERT_EQ(v, 0.0);
  }
}

// A row with no finite value gets the all-zero row's scales.
TEST(Quantize, NonFiniteRows) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = i % 3 == 0 ? kNaN : i % 3 == 1 ? kInf : -kInf;
  for (const KvFormat& f : all_kv_formats()) {
    SCOPED_TRACE(f.name());
    const QuantizedRow q = quantize(f, x);
    static const uint16_t kBf16[] = {0x7FFF, 0x7F80, 0xFF80}, kFp16[] = {0x7FFF, 0x7C00, 0xFC00},
                          kE4M3[] = {0x7F, 0x7E, 0xFE}, kE5M2[] = {0x7F, 0x7B, 0xFB}, kInt[] = {0, 0, 0};
    const uint16_t* want = f.kind == KvKind::kBF16      ? kBf16
                           : f.kind == KvKind::kFP16    ? kFp16
                           : f.kind == KvKind::kFP8E4M3 ? kE4M3
                           : f.kind == KvKind::kFP8E5M2 ? kE5M2
                                                        : kInt;  // int scale 0: all codes 0
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(q.code[i], want[i]) << "dim " << i;
    }
    const bool unit_scale = f.kind != KvKind::kINT8 && f.kind != KvKind::kINT4;
    for (int g = 0; g < kv_groups(f, 64); ++g) {
      EXPECT_EQ(q.scale[g], unit_scale ? 1.0f : 0.0f);
      EXPECT_EQ(q.shift[g], 0.0f);
    }
  }
}

TEST(Quantize, ConstantRows) {
  const std::vector<float> x(64, 3.0f);
  // int8: amax 3 -> s = fp16(3/127 = 0.0236220) = 2^-6 * (1 + 524/1024) = 0.02362060546875; 3/s = 127.006.
  QuantizedRow q = quantize(KvFormat::int8(0), x);
  EXPECT_EQ(q.scale[0], 0.02362060546875f);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(q.code[i], 127);
  // int4: s = 0, codes 0, value = z = 3 exactly.
  q = quantize(KvFormat::int4(2), x);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(q.scale[g], 0.0f);
    EXPECT_EQ(q.shift[g], 3.0f);
  }
  for (double v : dequantize(KvFormat::int4(2), 64, q)) ASSERT_EQ(v, 3.0);
  // fp8: scale 3/448, every value maps to the largest code.
  q = quantize(KvFormat::fp8_e5m2(), x);
  EXPECT_EQ(fbits(q.scale[0]), fbits(3.0f / 57344.0f));
  for (int i = 0; i < 64; ++i) ASSERT_EQ(q.code[i], 0x7B);
}

TEST(Quantize, HugeValues) {
  std::vector<float> x = zeros(64);
  x[0] = 3e38f;
  x[1] = -3e38f;
  x[2] = 1e30f;
  x[3] = 1;
  x[4] = -1e30f;
  // int8: 3e38/127 saturates to 65504 (0x7BFF); codes clamp.
  QuantizedRow q = quantize(KvFormat::int8(0), x);
  EXPECT_EQ(float_to_fp16_bits(q.scale[0]), 0x7BFF);
  const uint16_t want8[] = {127, 0x81, 127, 0, 0x81};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.code[i], want8[i]) << "dim " << i;
  // int4: max - min overflows -> s = 65504; z = fp16sat(-3e38) = -65504 (0xFBFF).
  q = quantize(KvFormat::int4(1), x);
  EXPECT_EQ(float_to_fp16_bits(q.scale[0]), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits(q.shift[0]), 0xFBFF);
  const uint16_t want4[] = {15, 0, 15, 1, 0, 1};  // 0 and 1: (x + 65504) / 65504 rounds to 1
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q.code[i], want4[i]) << "dim " << i;
  // fp8: the scale stays finite (3e38 / 448).
  q = quantize(KvFormat::fp8_e4m3(), x);
  EXPECT_EQ(fbits(q.scale[0]), fbits(3e38f / 448.0f));
  EXPECT_EQ(q.code[0], 0x7E);
  EXPECT_EQ(q.code[1], 0xFE);
  // 16-bit: a cast; fp16 overflows to Inf, bf16 does not.
  q = quantize(KvFormat::fp16(), x);
  EXPECT_EQ(q.code[0], 0x7C00);
  EXPECT_EQ(q.code[4], 0xFC00);
  q = quantize(KvFormat::bf16(), x);
  EXPECT_EQ(q.code[2], float_to_bf16_bits(1e30f));
  EXPECT_EQ(q.code[2] & 0x7F80, 0x7100);  // 1e30 ~ 2^99.7: exponent field 127 + 99 = 226 = 0xE2
}

TEST(Quantize, TinyValues) {
  std::vector<float> x = zeros(64);
  x[0] = 1e-40f;
  x[1] = -1e-40f;
  // int8: 1e-40 / 127 rounds to fp16 zero: scale 0, codes 0.
  QuantizedRow q = quantize(KvFormat::int8(0), x);
  EXPECT_EQ(fbits(q.scale[0]), 0u);
  EXPECT_EQ(q.code[0], 0);
  // int4: range / 15 rounds to 0; z = fp16(-1e-40) = -0.
  q = quantize(KvFormat::int4(1), x);
  EXPECT_EQ(q.scale[0], 0.0f);
  EXPECT_EQ(float_to_fp16_bits(q.shift[0]), 0x8000);
  EXPECT_EQ(q.code[0], 0);
  // fp8: a subnormal fp32 scale, still nonzero and finite; the values map to about +-448.
  q = quantize(KvFormat::fp8_e4m3(), x);
  EXPECT_GT(q.scale[0], 0.0f);
  EXPECT_TRUE(std::isfinite(q.scale[0]));
  const std::vector<double> y = dequantize(KvFormat::fp8_e4m3(), 64, q);
  EXPECT_NEAR(y[0], 1e-40, 0.1e-40);
  EXPECT_NEAR(y[1], -1e-40, 0.1e-40);
  // The smallest subnormal float: amax / 448 underflows to 0, so the scale falls back to 1.
  x[0] = from_bits(1);
  x[1] = 0;
  q = quantize(KvFormat::fp8_e5m2(), x);
  EXPECT_EQ(q.scale[0], 1.0f);
  EXPECT_EQ(q.code[0], 0);
}

// The signs of zero scale and shift must not depend on the order of the values (a kernel reduces in
// another order): -0 counts as below +0.
TEST(Quantize, SignedZerosAreOrderIndependent) {
  std::vector<float> x = zeros(64);
  for (int first : {0, 63}) {
    x.assign(64, 0.0f);
    x[size_t(first)] = -0.0f;
    const QuantizedRow q = quantize(KvFormat::int4(1), x);
    EXPECT_EQ(float_to_fp16_bits(q.shift[0]), 0x8000) << "-0 at " << first;
    EXPECT_EQ(fbits(q.scale[0]), 0u) << "-0 at " << first;
  }
  x.assign(64, -0.0f);
  const QuantizedRow q = quantize(KvFormat::int4(1), x);
  EXPECT_EQ(float_to_fp16_bits(q.shift[0]), 0x8000);
  EXPECT_EQ(fbits(q.scale[0]), 0u);
}

// Random finite rows of any magnitude: no NaN/Inf scale, finite dequantized values, fp16 scales.
TEST(Quantize, FiniteInputGivesFiniteScales) {
  QDEC_TEST_RNG(rng);
  std::uniform_int_distribution<int> exp_dist(-149, 127);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const KvFormat& f : all_kv_formats()) {
    if (kv_bits(f.kind) == 16) continue;  // a cast: fp16 overflow is Inf by design
    SCOPED_TRACE(f.name());
    for (int rep = 0; rep < 300; ++rep) {
      std::vector<float> x(128);
      const int e = exp_dist(rng);
      for (float& v : x) {
        // Mixed magnitudes around 2^e, sometimes a raw random pattern.
        v = rng() % 8 == 0 ? from_bits(static_cast<uint32_t>(rng())) : std::ldexp(normal(rng), e);
        if (!std::isfinite(v)) v = std::numeric_limits<float>::max();
      }
      const QuantizedRow q = quantize(f, x);
      for (int g = 0; g < kv_groups(f, 128); ++g) {
        ASSERT_TRUE(std::isfinite(q.scale[g]) && q.scale[g] >= 0.0f) << q.scale[g];
        ASSERT_TRUE(std::isfinite(q.shift[g])) << q.shift[g];
        if (f.kind == KvKind::kINT8 || f.kind == KvKind::kINT4) {
          ASSERT_EQ(fp16_bits_to_float(float_to_fp16_bits(q.scale[g])), q.scale[g]);
          ASSERT_EQ(fp16_bits_to_float(float_to_fp16_bits(q.shift[g])), q.shift[g]);
        }
      }
      for (double v : dequantize(f, 128, q)) ASSERT_TRUE(std::isfinite(v)) << v;
    }
  }
}

// ---- Round-trip error bounds ------------------------------------------------------------------------

// The largest error the format's rounding allows for x in group [lo, hi] (finite values only).
double error_bound(const KvFormat& f, const QuantizedRow& q, int g, double x, double lo, double hi) {
  const double ax = std::fabs(x);
  const double s = q.scale[g];
  switch (f.kind) {
    case KvKind::kBF16:
      return ax * 0x1p-8;
    case KvKind::kFP16:
      return ax * 0x1p-11 + 0x1p-25;
    case KvKind::kFP8E4M3:
    case KvKind::kFP8E5M2: {
      const bool e4m3 = f.kind == KvKind::kFP8E4M3;
      // Half an ulp (relative), or half the smallest subnormal; x / scale itself is rounded to float.
      const double half_sub = e4m3 ? 0x1p-10 : 0x1p-17;
      return (ax * (e4m3 ? 0x1p-4 : 0x1p-3) + s * half_sub) * (1 + 0x1p-20);
    }
    case KvKind::kINT8: {
      const double amax = std::max(std::fabs(lo), std::fabs(hi));
      return s * (0.5 + 1e-5) + std::max(0.0, amax - 127 * s);
    }
    case KvKind::kINT4:
      return s * (0.5 + 1e-5) + std::fabs(lo - double(q.shift[g])) + std::max(0.0, (hi - lo) - 15 * s);
  }
  return 0;
}

TEST(Quantize, RoundTripErrorBounds) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-10.0f, 10.0f);
  for (const KvFormat& f : all_kv_formats()) {
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE(f.name() + " head_dim " + std::to_string(d));
      const int groups = kv_groups(f, d), gsize = d / groups;
      for (int rep = 0; rep < 100; ++rep) {
        const float mag = std::exp2(log_mag(rng));
        const float offset = rep % 3 == 0 ? mag * normal(rng) * 4 : 0.0f;  // off-centre rows for int4
        std::vector<float> x(size_t(d), 0.0f);
        for (float& v : x) v = offset + mag * normal(rng);
        const QuantizedRow q = quantize(f, x);
        std::vector<double> y = dequantize(f, d, q);
        std::vector<float> yf(static_cast<size_t>(d));
        dequantize_row(f, d, q, yf.data());
        for (int g = 0; g < groups; ++g) {
          const auto [lo, hi] = std::minmax_element(x.begin() + g * gsize, x.begin() + (g + 1) * gsize);
          for (int i = g * gsize; i < (g + 1) * gsize; ++i) {
            const double bound = error_bound(f, q, g, x[i], *lo, *hi);
            ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "dim " << i << " x " << x[i] << " scale " << q.scale[g];
            // The float dequantization is the exact value rounded once.
            ASSERT_EQ(fbits(yf[i]), fbits(static_cast<float>(y[i]))) << "dim " << i;
          }
        }
        const double err = rel_l2(y.data(), std::vector<double>(x.begin(), x.end()).data(), size_t(d));
        ASSERT_LT(err, kv_bits(f.kind) == 4 ? 0.2 : 0.1);
      }
    }
  }
}

// ---- Names, sizes, validation -----------------------------------------------------------------------

TEST(Formats, NamesAndOrder) {
  const std::vector<std::string> want = {"bf16",     "fp16", "fp8e4m3", "fp8e5m2", "int8",   "int8-g64",
                                         "int8-g32", "int4", "int4-g2", "int4-g4", "int4-g8"};
  const std::vector<KvFormat> all = all_kv_formats();
  ASSERT_EQ(all.size(), want.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].name(), want[i]);
    KvFormat parsed = KvFormat::fp16();
    ASSERT_TRUE(parse_kv_format(want[i], &parsed).ok()) << want[i];
    EXPECT_EQ(parsed, all[i]);
    for (int d : {64, 128, 256}) EXPECT_TRUE(validate_kv_format(all[i], d).ok()) << want[i] << " " << d;
  }
}

TEST(Formats, SizesMatchDocsTable) {
  // docs/formats.md, D = 128: data, meta and row bytes.
  struct Row {
    const char* name;
    int bits, data, meta, row;
  };
  const Row table[] = {{"bf16", 16, 256, 0, 256},    {"fp16", 16, 256, 0, 256}, {"fp8e4m3", 8, 128, 4, 132},
                       {"fp8e5m2", 8, 128, 4, 132},  {"int8", 8, 128, 2, 130},  {"int8-g64", 8, 128, 4, 132},
                       {"int8-g32", 8, 128, 8, 136}, {"int4", 4, 64, 4, 68},    {"int4-g2", 4, 64, 8, 72},
                       {"int4-g4", 4, 64, 16, 80},   {"int4-g8", 4, 64, 32, 96}};
  for (const Row& r : table) {
    KvFormat f;
    ASSERT_TRUE(parse_kv_format(r.name, &f).ok());
    EXPECT_EQ(kv_bits(f.kind), r.bits) << r.name;
    EXPECT_EQ(kv_data_bytes(f, 128), r.data) << r.name;
    EXPECT_EQ(kv_meta_bytes(f, 128), r.meta) << r.name;
    EXPECT_EQ(kv_row_bytes(f, 128), r.row) << r.name;
  }
  EXPECT_EQ(kv_groups(KvFormat::int8(32), 256), 8);
  EXPECT_EQ(kv_groups(KvFormat::int8(64), 32), 0);
  EXPECT_EQ(kv_groups(KvFormat::int4(8), 64), 8);
  EXPECT_EQ(kv_groups(KvFormat::int8(0), 64), 1);
}

void expect_invalid(const Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message '" << s.message() << "' lacks " << needle;
  EXPECT_EQ(s.to_string(), "InvalidArgument: " + s.message());
}

TEST(Formats, BadInput) {
  KvFormat f = KvFormat::bf16();
  Status s = parse_kv_format("int5", &f);
  expect_invalid(s, "'int5'");
  EXPECT_NE(s.message().find("int4-g8"), std::string::npos) << "accepted names are listed";
  EXPECT_EQ(f, KvFormat::bf16()) << "output untouched on failure";
  expect_invalid(parse_kv_format("", &f), "''");
  expect_invalid(parse_kv_format("INT8", &f), "'INT8'");
  expect_invalid(parse_kv_format("int8-g16", &f), "'int8-g16'");
  EXPECT_FALSE(parse_kv_format("int8", nullptr).ok());

  expect_invalid(validate_kv_format(KvFormat::int8(0), 96), "96");
  expect_invalid(validate_kv_format(KvFormat::bf16(), 0), "head_dim 0");
  expect_invalid(validate_kv_format(KvFormat::int8(64), 32), "head_dim 32");
  expect_invalid(validate_kv_format(KvFormat::int8(48), 128), "48");
  expect_invalid(validate_kv_format(KvFormat::int8(-32), 128), "-32");
  expect_invalid(validate_kv_format(KvFormat::int4(3), 128), "group count 3");
  expect_invalid(validate_kv_format(KvFormat::int4(16), 128), "16");
  expect_invalid(validate_kv_format(KvFormat::int4(0), 128), "group count 0");
  expect_invalid(validate_kv_format(KvFormat{KvKind::kFP16, 32, 1}, 128), "int8_group_size 32");
  expect_invalid(validate_kv_format(KvFormat{KvKind::kINT8, 0, 4}, 128), "int4_groups 4");
  expect_invalid(validate_kv_format(KvFormat{static_cast<KvKind>(9), 0, 1}, 128), "kind 9");

  KvTileLayout layout{KvFormat::int4(2), 128, 24};
  expect_invalid(validate_tile_layout(layout), "page_size 24");
  layout.page_size = 512;
  expect_invalid(validate_tile_layout(layout), "page_size 512");
  layout.page_size = 8;
  expect_invalid(validate_tile_layout(layout), "page_size 8");
  layout.page_size = 64;
  layout.head_dim = 80;
  expect_invalid(validate_tile_layout(layout), "head_dim 80");
  layout.head_dim = 128;
  EXPECT_TRUE(validate_tile_layout(layout).ok());

  // The void functions cannot report; they must neither crash nor write on bad input.
  QuantizedRow q;
  q.code[0] = 7;
  quantize_row(KvFormat::int8(0), 128, nullptr, &q);
  EXPECT_EQ(q.code[0], 0);
  const std::vector<float> x(128, 1.0f);
  quantize_row(KvFormat::int4(3), 128, x.data(), &q);
  EXPECT_EQ(q.scale[0], 0.0f);
  quantize_row(KvFormat::int8(0), 512, x.data(), &q);  // head_dim beyond kMaxHeadDim
  quantize_row(KvFormat::int8(0), 128, x.data(), nullptr);
  std::vector<uint8_t> tile(1024, 0xAB);
  tile_write_row(KvTileLayout{KvFormat::int8(0), 96, 16}, KvRole::kKey, tile.data(), 0, q);
  tile_write_row(KvTileLayout{KvFormat::int8(0), 64, 16}, KvRole::kKey, tile.data(), 16, q);
  tile_write_row(KvTileLayout{KvFormat::int8(0), 64, 16}, static_cast<KvRole>(2), tile.data(), 0, q);
  EXPECT_TRUE(std::all_of(tile.begin(), tile.end(), [](uint8_t b) { return b == 0xAB; }));
  const DataPosition p = tile_data_position(KvTileLayout{KvFormat::int8(0), 64, 16}, KvRole::kKey, 0, 64);
  EXPECT_EQ(p.byte, 0u);
  EXPECT_EQ(p.nibble, 0);
}

TEST(Status, Names) {
  EXPECT_STREQ(status_code_name(StatusCode::kOk), "Ok");
  EXPECT_STREQ(status_code_name(StatusCode::kInvalidArgument), "InvalidArgument");
  EXPECT_STREQ(status_code_name(StatusCode::kUnsupported), "Unsupported");
  EXPECT_STREQ(status_code_name(StatusCode::kCudaError), "CudaError");
  EXPECT_STREQ(status_code_name(StatusCode::kOutOfMemory), "OutOfMemory");
  EXPECT_STREQ(status_code_name(StatusCode::kNoDevice), "NoDevice");
  EXPECT_EQ(Status(StatusCode::kInvalidArgument, "head_dim 96 is not supported").to_string(),
            "InvalidArgument: head_dim 96 is not supported");
  EXPECT_EQ(Status::Ok().to_string(), "Ok");
}

// ---- Tile layout ------------------------------------------------------------------------------------

const KvFormat kBitsFormats[] = {KvFormat::bf16(), KvFormat::int8(0), KvFormat::int4(1)};  // 16, 8, 4 bits

TEST(TileLayout, DataPositionIsABijection) {
  for (const KvFormat& f : kBitsFormats) {
    for (KvRole role : {KvRole::kKey, KvRole::kValue}) {
      for (int d : {64, 128, 256}) {
        for (int page : {16, 64, 256}) {
          const KvTileLayout layout{f, d, page};
          SCOPED_TRACE(f.name() + (role == KvRole::kKey ? " K" : " V") + " D=" + std::to_string(d) +
                       " page=" + std::to_string(page));
          const int bits = kv_bits(f.kind);
          const size_t block_bytes = size_t(16) * kv_data_bytes(f, d);
          // One counter per nibble of the data region.
          std::vector<uint8_t> hits(layout.meta_offset() * 2, 0);
          for (int t = 0; t < page; ++t) {
            for (int i = 0; i < d; ++i) {
              const DataPosition p = tile_data_position(layout, role, t, i);
              ASSERT_LT(p.byte, layout.meta_offset());
              ASSERT_EQ(p.byte / block_bytes, size_t(t / 16)) << "token " << t << " leaves its block16";
              if (bits == 4) {
                ASSERT_TRUE(p.nibble == 0 || p.nibble == 1);
                ++hits[2 * p.byte + p.nibble];
              } else {
                ASSERT_EQ(p.nibble, 0);
                for (int b = 0; b < bits / 8; ++b) {
                  ++hits[2 * (p.byte + b)];
                  ++hits[2 * (p.byte + b) + 1];
                }
                if (bits == 16) {
                  ASSERT_EQ(p.byte % 2, 0u);
                }
              }
            }
          }
          for (size_t n = 0; n < hits.size(); ++n) ASSERT_EQ(hits[n], 1) << "nibble slot " << n;
        }
      }
    }
  }
}

struct Pos {
  int token, dim;
  size_t byte;
  int nibble;
};

void expect_positions(const KvTileLayout& layout, KvRole role, std::initializer_list<Pos> want) {
  for (const Pos& w : want) {
    const DataPosition p = tile_data_position(layout, role, w.token, w.dim);
    EXPECT_EQ(p.byte, w.byte) << "token " << w.token << " dim " << w.dim;
    EXPECT_EQ(p.nibble, w.nibble) << "token " << w.token << " dim " << w.dim;
  }
}

// Positions derived by hand from docs/formats.md. Lane l = 4g + tig; lane byte x sits at block16 offset
// (x / 16) * 512 + 16 l + x % 16; a block16 holds 16 * data_bytes_per_row bytes. Fragment f covers dims
// 16f .. 16f+15; slot s = 2r + hi is the value's place in it (R0.lo, R0.hi, .., R3.hi).
TEST(TileLayout, HandPositions) {
  // K, 4-bit, D=128 (lane_bytes 32, block16 1024 bytes). K is the A operand (m = token, k = dim): register r
  // holds token g + 8 (r & 1), dims 16f + 2tig + 8 (r >> 1) + hi. Fragment f is word f (lane byte 4f);
  // nibble i = r + 4 hi. Token 0 dim 0: R0.lo -> nibble 0. Dim 1: R0.hi -> nibble 4 (byte 2 low). Token 8:
  // R1.lo -> nibble 1 (byte 0 high). Dim 8: R2.lo -> nibble 2 (byte 1 low). Tokens t and t + 8 share a byte.
  expect_positions(KvTileLayout{KvFormat::int4(1), 128, 64}, KvRole::kKey,
                   {{0, 0, 0, 0},
                    {0, 1, 2, 0},
                    {8, 0, 0, 1},
                    {8, 1, 2, 1},
                    {0, 8, 1, 0},
                    {0, 9, 3, 0},
                    {8, 8, 1, 1},
                    {8, 9, 3, 1},
                    {0, 2, 16, 0},       // tig 1 -> lane 1
                    {1, 0, 64, 0},       // g 1 -> lane 4
                    {9, 3, 82, 1},       // g 1, tig 1 -> lane 5; R1.hi -> nibble 5 (byte 2 high)
                    {0, 16, 4, 0},       // k-step 1 -> fragment 1 -> word 1
                    {0, 24, 5, 0},       // fragment 1 R2.lo -> word 1 nibble 2
                    {0, 64, 512, 0},     // fragment 4 -> lane byte 16 -> chunk 1
                    {0, 112, 524, 0},    // fragment 7 -> lane byte 28
                    {15, 127, 1023, 1},  // lane 31, fragment 7 R3.hi -> word 7 nibble 7
                    {16, 0, 1024, 0},    // block16 1
                    {33, 0, 2112, 0}});  // block16 2, token 1 -> lane 4
  // V, 4-bit, D=128. V is the A operand (m = dim, k = token): register r holds dim 16f + g + 8 (r & 1),
  // tokens 2tig + 8 (r >> 1) + hi. Dim 0 tokens 0, 1: lane 0 R0.lo / R0.hi -> nibbles 0 and 4; tokens 8, 9:
  // R2 -> nibbles 2 and 6. Dim 8: R1 -> nibble 1. Dims d and d + 8 of a token share a byte.
  expect_positions(KvTileLayout{KvFormat::int4(4), 128, 16}, KvRole::kValue,
                   {{0, 0, 0, 0},
                    {1, 0, 2, 0},
                    {8, 0, 1, 0},
                    {9, 0, 3, 0},
                    {0, 8, 0, 1},
                    {8, 8, 1, 1},
                    {9, 8, 3, 1},
                    {2, 0, 16, 0},  // tig 1 -> lane 1
                    {0, 1, 64, 0},  // g 1 -> lane 4
                    {0, 16, 4, 0},  // fragment 1 -> word 1
                    {0, 64, 512, 0},
                    {15, 127, 1023, 1}});
  // K, 16-bit, D=128 (lane_bytes 128, block16 4096 bytes): fragment f is 16 bytes at lane offset 16f, slot s
  // at 16f + 2s.
  expect_positions(KvTileLayout{KvFormat::bf16(), 128, 64}, KvRole::kKey,
                   {{0, 0, 0, 0},
                    {0, 1, 2, 0},
                    {8, 0, 4, 0},   // R1.lo
                    {0, 8, 8, 0},   // R2.lo
                    {0, 9, 10, 0},  // R2.hi
                    {8, 9, 14, 0},  // R3.hi
                    {0, 2, 16, 0},
                    {1, 0, 64, 0},
                    {0, 16, 512, 0},     // fragment 1 -> lane byte 16 -> chunk 1
                    {0, 112, 3584, 0},   // fragment 7 -> lane byte 112 -> chunk 7
                    {0, 120, 3592, 0},   // fragment 7 R2.lo -> lane byte 120
                    {15, 127, 4094, 0},  // lane 31, fragment 7 R3.hi -> lane byte 126
                    {16, 0, 4096, 0}});
  expect_positions(KvTileLayout{KvFormat::fp16(), 128, 16}, KvRole::kValue,
                   {{0, 0, 0, 0},
                    {1, 0, 2, 0},
                    {0, 8, 4, 0},  // R1.lo
                    {8, 0, 8, 0},  // R2.lo
                    {9, 0, 10, 0},
                    {0, 1, 64, 0},
                    {0, 16, 512, 0}});
  // K, 8-bit, D=128 (lane_bytes 64): fragment f is 8 bytes at lane offset 8f, slot s at 8f + s.
  expect_positions(KvTileLayout{KvFormat::fp8_e4m3(), 128, 64}, KvRole::kKey,
                   {{0, 0, 0, 0},
                    {0, 1, 1, 0},
                    {8, 0, 2, 0},
                    {0, 8, 4, 0},
                    {0, 9, 5, 0},
                    {0, 16, 8, 0},
                    {0, 32, 512, 0},     // fragment 2 -> lane byte 16 -> chunk 1
                    {7, 15, 501, 0},     // g 7, tig 3 -> lane 31, fragment 0 R2.hi -> lane byte 5
                    {15, 15, 503, 0}});  // lane 31, R3.hi -> lane byte 7
  expect_positions(KvTileLayout{KvFormat::int8(32), 128, 64}, KvRole::kValue,
                   {{0, 0, 0, 0},
                    {1, 0, 1, 0},
                    {0, 8, 2, 0},
                    {8, 0, 4, 0},
                    {9, 0, 5, 0},
                    {0, 16, 8, 0},
                    {2, 0, 16, 0},
                    {0, 1, 64, 0}});
  // D=64, 4-bit: one 16-byte chunk per lane, block16 512 bytes.
  expect_positions(KvTileLayout{KvFormat::int4(1), 64, 16}, KvRole::kKey, {{0, 48, 12, 0}, {15, 63, 511, 1}});

  // Meta: entry (token t, group g) at meta_offset + (g * page_size + t) * entry_bytes.
  EXPECT_EQ(tile_meta_offset(KvTileLayout{KvFormat::int4(4), 128, 64}, 3, 2), 4096u + (2 * 64 + 3) * 4);
  EXPECT_EQ(tile_meta_offset(KvTileLayout{KvFormat::int8(32), 128, 16}, 5, 3), 2048u + (3 * 16 + 5) * 2);
  EXPECT_EQ(tile_meta_offset(KvTileLayout{KvFormat::fp8_e5m2(), 64, 256}, 255, 0), 16384u + 255 * 4);
  EXPECT_EQ((KvTileLayout{KvFormat::int4(8), 128, 64}.tile_bytes()), 64u * 96);
}

TEST(TileLayout, MetaBytes) {
  const KvTileLayout layout{KvFormat::int4(2), 64, 16};
  std::vector<uint8_t> tile(layout.tile_bytes(), 0);
  QuantizedRow q;
  q.scale[0] = 1.0f;      // 0x3C00
  q.shift[0] = -2.0f;     // 0xC000
  q.scale[1] = 65504.0f;  // 0x7BFF
  q.shift[1] = 0.5f;      // 0x3800
  tile_write_row(layout, KvRole::kKey, tile.data(), 5, q);
  const size_t m0 = tile_meta_offset(layout, 5, 0), m1 = tile_meta_offset(layout, 5, 1);
  EXPECT_EQ(m0, 16u * 32 + 5 * 4);
  EXPECT_EQ(m1, 16u * 32 + (16 + 5) * 4);
  const uint8_t want0[] = {0x00, 0x3C, 0x00, 0xC0}, want1[] = {0xFF, 0x7B, 0x00, 0x38};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tile[m0 + i], want0[i]);
    EXPECT_EQ(tile[m1 + i], want1[i]);
  }
  const KvTileLayout fp8{KvFormat::fp8_e4m3(), 64, 16};
  std::vector<uint8_t> tile8(fp8.tile_bytes(), 0);
  q.scale[0] = 1.5f;  // 0x3FC00000, little-endian
  tile_write_row(fp8, KvRole::kValue, tile8.data(), 1, q);
  const uint8_t want8[] = {0x00, 0x00, 0xC0, 0x3F};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tile8[16 * 64 + 4 + i], want8[i]);
}

// A QuantizedRow with random codes of the format's width and random (storable) scales.
QuantizedRow random_row(const KvFormat& f, int head_dim, std::mt19937_64& rng) {
  QuantizedRow q;
  const int bits = kv_bits(f.kind);
  for (int i = 0; i < head_dim; ++i) q.code[i] = static_cast<uint16_t>(rng() & ((1u << bits) - 1));
  auto random_fp16 = [&] {
    uint16_t h = 0x7C00;
    while ((h & 0x7C00) == 0x7C00) h = static_cast<uint16_t>(rng());  // finite only
    return fp16_bits_to_float(h);
  };
  for (int g = 0; g < kv_groups(f, head_dim); ++g) {
    if (bits == 16) {
      q.scale[g] = 1.0f;
    } else if (f.kind == KvKind::kFP8E4M3 || f.kind == KvKind::kFP8E5M2) {
      q.scale[g] = from_bits(static_cast<uint32_t>(rng()) & 0x7F7FFFFFu);
    } else {
      q.scale[g] = random_fp16();
      if (f.kind == KvKind::kINT4) q.shift[g] = random_fp16();
    }
  }
  return q;
}

void expect_same_row(const KvFormat& f, int head_dim, const QuantizedRow& a, const QuantizedRow& b) {
  for (int i = 0; i < head_dim; ++i) ASSERT_EQ(a.code[i], b.code[i]) << "dim " << i;
  for (int g = 0; g < kv_groups(f, head_dim); ++g) {
    ASSERT_EQ(fbits(a.scale[g]), fbits(b.scale[g])) << "group " << g;
    ASSERT_EQ(fbits(a.shift[g]), fbits(b.shift[g])) << "group " << g;
  }
}

TEST(TileLayout, WriteReadRoundTripInRandomOrder) {
  QDEC_TEST_RNG(rng);
  struct Case {
    KvFormat f;
    int d, page;
  };
  std::vector<Case> cases;
  for (const KvFormat& f : all_kv_formats()) cases.push_back({f, 128, 64});
  for (const KvFormat& f :
       {KvFormat::bf16(), KvFormat::fp8_e5m2(), KvFormat::int8(32), KvFormat::int4(1), KvFormat::int4(8)}) {
    for (int d : {64, 256}) {
      for (int page : {16, 256}) cases.push_back({f, d, page});
    }
  }
  for (const Case& c : cases) {
    for (KvRole role : {KvRole::kKey, KvRole::kValue}) {
      const KvTileLayout layout{c.f, c.d, c.page};
      SCOPED_TRACE(c.f.name() + (role == KvRole::kKey ? " K" : " V") + " D=" + std::to_string(c.d) +
                   " page=" + std::to_string(c.page));
      std::vector<QuantizedRow> rows(size_t(c.page));
      for (QuantizedRow& r : rows) r = random_row(c.f, c.d, rng);
      std::vector<int> order(size_t(c.page));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      // Two tiles with different garbage, written in different orders, must end up identical: every byte of
      // a full tile is owned by some token, and no write disturbs another token's nibbles.
      std::vector<uint8_t> a(layout.tile_bytes()), b(layout.tile_bytes());
      for (uint8_t& v : a) v = static_cast<uint8_t>(rng());
      for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
      for (int t : order) tile_write_row(layout, role, a.data(), t, rows[size_t(t)]);
      for (int t = 0; t < c.page; ++t) tile_write_row(layout, role, b.data(), t, rows[size_t(t)]);
      ASSERT_TRUE(a == b);
      for (int t = 0; t < c.page; ++t) {
        QuantizedRow back;
        tile_read_row(layout, role, a.data(), t, &back);
        SCOPED_TRACE("token " + std::to_string(t));
        expect_same_row(c.f, c.d, rows[size_t(t)], back);
      }
    }
  }
}

TEST(TileLayout, Int4WritePreservesOtherNibbles) {
  for (KvRole role : {KvRole::kKey, KvRole::kValue}) {
    const KvTileLayout layout{KvFormat::int4(1), 128, 16};
    for (int t = 0; t < 16; ++t) {
      std::vector<uint8_t> tile(layout.tile_bytes(), 0xFF);
      tile_write_row(layout, role, tile.data(), t, QuantizedRow{});
      for (int u = 0; u < 16; ++u) {
        QuantizedRow back;
        tile_read_row(layout, role, tile.data(), u, &back);
        for (int i = 0; i < 128; ++i) ASSERT_EQ(back.code[i], u == t ? 0 : 15) << "wrote " << t << ", read " << u;
      }
    }
  }
}

// ---- Contiguous cache -------------------------------------------------------------------------------

TEST(Cache, QuantizeIntoCacheMatchesRows) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const KvFormat& f : all_kv_formats()) {
    for (KvRole role : {KvRole::kKey, KvRole::kValue}) {
      SCOPED_TRACE(f.name() + (role == KvRole::kKey ? " K" : " V"));
      ContiguousKvLayout layout;
      layout.tile = KvTileLayout{f, 64, 16};
      layout.batch = 4;
      layout.t_max = 40;  // 3 pages, the last one partly used
      layout.num_kv_heads = 2;
      const int32_t seq_lens[] = {40, 0, 17, 1 + static_cast<int32_t>(rng() % 40)};
      const size_t d = 64, heads = 2, n = size_t(layout.batch) * layout.t_max * heads * d;
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng) * 3.0f;
      QuantizeOptions opts;
      if (rng() % 2 == 0) opts.fp8_static_scale = 0.25f;
      std::vector<uint8_t> cache(layout.total_bytes(), 0xA5);
      quantize_into_cache(layout, role, x.data(), seq_lens, cache.data(), opts);
      std::vector<double> y(n, -1.0);
      dequantize_cache_f64(layout, role, cache.data(), seq_lens, y.data());

      // Which bits of the cache belong to live tokens; everything else must still hold 0xA5.
      std::vector<uint8_t> owned(cache.size(), 0);
      const KvTileLayout& tl = layout.tile;
      for (int b = 0; b < layout.batch; ++b) {
        for (int t = 0; t < layout.t_max; ++t) {
          for (int h = 0; h < layout.num_kv_heads; ++h) {
            const size_t row = ((size_t(b) * layout.t_max + t) * heads + h) * d;
            if (t >= seq_lens[b]) {
              for (size_t i = 0; i < d; ++i) ASSERT_EQ(y[row + i], 0.0);
              continue;
            }
            QuantizedRow q;
            quantize_row(f, 64, x.data() + row, &q, opts);
            std::vector<double> want(d);
            dequantize_row_f64(f, 64, q, want.data());
            for (size_t i = 0; i < d; ++i) {
              ASSERT_EQ(y[row + i], want[i]) << "b " << b << " t " << t << " h " << h << " dim " << i;
            }
            const size_t base = layout.tile_offset(b, t, h);
            const int tok = t % tl.page_size;
            for (int i = 0; i < 64; ++i) {
              const DataPosition p = tile_data_position(tl, role, tok, i);
              const int bits = kv_bits(f.kind);
              if (bits == 4) {
                owned[base + p.byte] |= p.nibble ? 0xF0 : 0x0F;
              } else {
                for (int k = 0; k < bits / 8; ++k) owned[base + p.byte + k] = 0xFF;
              }
            }
            for (int g = 0; g < kv_groups(f, 64); ++g) {
              const size_t m = base + tile_meta_offset(tl, tok, g);
              const int entry = kv_meta_bytes(f, 64) / kv_groups(f, 64);
              for (int k = 0; k < entry; ++k) owned[m + k] = 0xFF;
            }
          }
        }
      }
      for (size_t i = 0; i < cache.size(); ++i) {
        ASSERT_EQ(cache[i] & ~owned[i] & 0xFF, 0xA5 & ~owned[i] & 0xFF) << "byte " << i << " was overwritten";
      }
    }
  }
}

}  // namespace
}  // namespace qdec
