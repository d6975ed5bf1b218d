// Activation quantization kernels (qdec/act_quant.h) against their CPU ground truth (qdec/int8_quant.h), bit for
// bit: per-token int8 (bf16 and fp16 input), RMSNorm + int8, and seed 003's per-K-block int8 (bf16 / fp16 / fp32
// input, blocks 32 / 64 / 128). Rows: random at mixed magnitudes, all zero, huge, NaN / Inf, -0 / +0 blocks; odd K,
// K above the register path's limit, padded ldx / ldq, an unaligned X (scalar loads). Outputs are poisoned before
// every launch; the padding [k, ldq) must keep its poison. The documented errors launch nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "int8gemm/act_quant_internal.h"
#include "qdec/act_quant.h"
#include "qdec/formats.h"
#include "qdec/int8_quant.h"
#include "test_util.h"

namespace qdec {
namespace {

using test::DeviceBuffer;

constexpr uint8_t kCodePoison = 0x80;  // -128: the symmetric quantizer never writes it

uint16_t to16(float v, GemmDType d) {
  return d == GemmDType::kBF16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v);
}
float from16(uint16_t b, GemmDType d) {
  return d == GemmDType::kBF16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Rows of mixed character: row r % 6 == 0 all zero, 1 huge (near the dtype's max), 2 holds NaN and +-Inf,
// 3 tiny (subnormal-ish scales), 4 half-integers with amax 127 (scale 1: every quotient is exact and half of them
// are ties, the kernels' division path), others normal with a per-row magnitude.
std::vector<float> make_rows(std::mt19937_64& rng, int m, int k, GemmDType d, bool special) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(-3.f, 3.f);
  const float huge = d == GemmDType::kFP16 ? 30000.f : 1e37f;
  std::vector<float> x(size_t(m) * k);
  for (int r = 0; r < m; ++r) {
    const int kind = special ? r % 6 : 5;
    const float mag = std::pow(10.f, ud(rng));
    for (int c = 0; c < k; ++c) {
      float v = nd(rng) * mag;
      if (kind == 0) v = 0.f;
      if (kind == 1) v = nd(rng) * huge / 4;
      if (kind == 3) v = nd(rng) * (d == GemmDType::kFP16 ? 1e-4f : 1e-30f);
      if (kind == 4) v = c == 0 ? 127.f : 0.5f * float(int(rng() % 509) - 254);
      x[size_t(r) * k + c] = v;
    }
    if (kind == 2 && k >= 3) {
      x[size_t(r) * k + rng() % k] = std::numeric_limits<float>::quiet_NaN();
      x[size_t(r) * k + rng() % k] = std::numeric_limits<float>::infinity();
      x[size_t(r) * k + rng() % k] = -std::numeric_limits<float>::infinity();
    }
  }
  return x;
}

struct RowCase {
  GemmDType dtype;
  int m, k;
  int ldx_pad, ldq_pad;  // extra elements
  bool unaligned;        // X starts one element past a 16-byte boundary
  bool special;
  bool pdl = false;   // launched as programmatic dependents, three times back to back
  float eps = 1e-5f;  // RMSNorm epsilon
};

std::string row_case_name(const ::testing::TestParamInfo<RowCase>& info) {
  const RowCase& c = info.param;
  return std::string(gemm_dtype_name(c.dtype)) + "_m" + std::to_string(c.m) + "_k" + std::to_string(c.k) + "_px" +
         std::to_string(c.ldx_pad) + "_pq" + std::to_string(c.ldq_pad) + (c.unaligned ? "_unaligned" : "") +
         (c.special ? "_special" : "") + (c.pdl ? "_pdl" : "") + (c.eps == 0.0f ? "_eps0" : "");
}

class ActQuantRows : public ::testing::TestWithParam<RowCase> {};

// Runs the per-token quantizer (norm = false) or RMSNorm + quantizer (norm = true) and compares with the CPU.
// rms_vectors: RMSNorm's vectors per thread at K <= 4096 forced (2 or 4), 0 for the device's choice.
void run_rows(const RowCase& c, bool norm, int rms_vectors = 0) {
  QDEC_TEST_RNG(rng);
  const long long ldx = c.k + c.ldx_pad;
  const long long ldq = (c.k + 15) / 16 * 16 + c.ldq_pad;
  std::vector<float> xf = make_rows(rng, c.m, c.k, c.dtype, c.special);
  std::vector<uint16_t> xb(size_t(c.m) * ldx, to16(7.f, c.dtype));  // padding holds junk
  std::vector<float> xq(size_t(c.m) * c.k);                         // what the kernel sees, as float
  for (int r = 0; r < c.m; ++r)
    for (int i = 0; i < c.k; ++i) {
      xb[size_t(r) * ldx + i] = to16(xf[size_t(r) * c.k + i], c.dtype);
      xq[size_t(r) * c.k + i] = from16(xb[size_t(r) * ldx + i], c.dtype);
    }
  std::vector<uint16_t> wb(c.k);
  std::vector<float> wf(c.k);
  std::uniform_real_distribution<float> wd(0.5f, 1.5f);
  for (int i = 0; i < c.k; ++i) {
    wb[i] = to16(wd(rng), c.dtype);
    wf[i] = from16(wb[i], c.dtype);
  }
  const float eps = c.eps;
  Int8Activations ref;
  if (norm) {
    QDEC_ASSERT_OK(rmsnorm_quantize_int8(xq.data(), wf.data(), c.m, c.k, eps, &ref));
  } else {
    QDEC_ASSERT_OK(quantize_activations_int8(xq.data(), c.m, c.k, &ref));
  }

  const size_t off = c.unaligned ? 1 : 0;
  DeviceBuffer dx((xb.size() + 8) * 2), dw((c.k + 8) * 2), dq(size_t(c.m) * ldq), ds(c.m * 4), dsum(c.m * 4);
  uint16_t* xptr = dx.as<uint16_t>() + off;
  QDEC_CUDA_CHECK(cudaMemcpy(xptr, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dw.get(), wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemset(dq.get(), kCodePoison, dq.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(dsum.get(), 0x7F, dsum.bytes()));
  ActQuantParams p;
  p.m = c.m;
  p.k = c.k;
  p.x_dtype = c.dtype;
  p.x = xptr;
  p.ldx = ldx;
  p.q = dq.as<int8_t>();
  p.ldq = ldq;
  p.scale = ds.as<float>();
  p.row_sum = dsum.as<int32_t>();
  p.pdl = c.pdl;
  // With pdl, each launch is the previous one's programmatic dependent (it overwrites the same outputs).
  for (int rep = 0; rep < (c.pdl ? 3 : 1); ++rep) {
    if (norm) {
      RmsNormQuantParams rp;
      rp.out = p;
      rp.weight = dw.get();
      rp.eps = eps;
      QDEC_ASSERT_OK(act_quant_internal::rmsnorm_quantize_vectors(rp, rms_vectors, nullptr));
    } else {
      QDEC_ASSERT_OK(quantize_activations(p, nullptr));
    }
  }
  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int8_t> q(size_t(c.m) * ldq);
  std::vector<float> s(c.m);
  std::vector<int32_t> sum(c.m);
  QDEC_CUDA_CHECK(cudaMemcpy(q.data(), dq.get(), q.size(), cudaMemcpyDeviceToHost));
  QDEC_CUDA_CHECK(cudaMemcpy(s.data(), ds.get(), s.size() * 4, cudaMemcpyDeviceToHost));
  QDEC_CUDA_CHECK(cudaMemcpy(sum.data(), dsum.get(), sum.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int r = 0; r < c.m && bad < 10; ++r) {
    if (bits(s[r]) != bits(ref.scale[r])) {
      ADD_FAILURE() << "row " << r << " scale " << s[r] << " != CPU " << ref.scale[r];
      ++bad;
    }
    if (sum[r] != ref.row_sum[r]) {
      ADD_FAILURE() << "row " << r << " row_sum " << sum[r] << " != CPU " << ref.row_sum[r];
      ++bad;
    }
    for (long long i = 0; i < ldq && bad < 10; ++i) {
      const int got = q[size_t(r) * ldq + i];
      const int want = i < c.k ? ref.q[size_t(r) * c.k + i] : int(int8_t(kCodePoison));
      if (got != want) {
        ADD_FAILURE() << "row " << r << " col " << i << (i >= c.k ? " (padding)" : "") << ": " << got << " != " << want;
        ++bad;
      }
    }
  }
}

TEST_P(ActQuantRows, PerTokenBitExact) {
  QDEC_SKIP_WITHOUT_GPU();
  run_rows(GetParam(), false);
}

// K <= 4096 runs both CTA sets of the streaming kernel (2 and 4 vectors per thread), whichever the device takes by
// default; larger K the device's choice.
TEST_P(ActQuantRows, RmsNormBitExact) {
  QDEC_SKIP_WITHOUT_GPU();
  if (GetParam().k > 4096) {
    run_rows(GetParam(), true);
    return;
  }
  for (int vectors : {2, 4}) {
    SCOPED_TRACE("vectors per thread " + std::to_string(vectors));
    run_rows(GetParam(), true, vectors);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ActQuantRows,
    ::testing::Values(
        RowCase{GemmDType::kBF16, 1, 4096, 0, 0, false, false}, RowCase{GemmDType::kBF16, 12, 4096, 0, 0, false, true},
        RowCase{GemmDType::kBF16, 7, 1, 0, 0, false, false}, RowCase{GemmDType::kBF16, 6, 3, 5, 16, false, true},
        RowCase{GemmDType::kBF16, 13, 129, 3, 32, false, true}, RowCase{GemmDType::kBF16, 6, 8191, 0, 16, false, true},
        RowCase{GemmDType::kBF16, 18, 14336, 8, 0, false, true},
        RowCase{GemmDType::kBF16, 100, 8192, 0, 0, false, false},
        RowCase{GemmDType::kBF16, 6, 20000, 0, 0, false, true},  // above the register path
        RowCase{GemmDType::kBF16, 6, 1000, 0, 0, true, true}, RowCase{GemmDType::kFP16, 12, 4096, 0, 0, false, true},
        RowCase{GemmDType::kFP16, 6, 777, 1, 16, true, true}, RowCase{GemmDType::kFP16, 6, 18000, 0, 0, false, true},
        // More rows than resident CTAs: each CTA of the streaming kernel walks several rows (special rows in
        // between: the per-row reference rules and the fast quantizer alternate within one CTA).
        RowCase{GemmDType::kBF16, 2000, 4096, 0, 0, false, true},
        RowCase{GemmDType::kFP16, 1500, 2048, 8, 16, false, true},
        RowCase{GemmDType::kBF16, 700, 14336, 0, 0, false, true},
        RowCase{GemmDType::kBF16, 3000, 64, 0, 0, false, false},
        RowCase{GemmDType::kFP16, 300, 12288, 0, 0, false, true},  // 256 threads x 7 vectors, fp16
        RowCase{GemmDType::kBF16, 40, 16384, 0, 0, false, true},   // 512 threads x 4 vectors
        // RMSNorm from 2048 rows with K in (4096, 8192]: 128 threads x 8 vectors (the plain quantizer keeps 256 x 4);
        // K = 6000 leaves vectors past the row in every thread's last slots.
        RowCase{GemmDType::kBF16, 2048, 8192, 0, 0, false, true},
        RowCase{GemmDType::kFP16, 2500, 6000, 8, 16, false, true},
        RowCase{GemmDType::kBF16, 2047, 8192, 0, 0, false, true},  // one row below: 256 x 4
        // Many rows on each CTA size of K <= 4096 (64, 128 and 256 threads x 2 vectors; for RMSNorm on a device with
        // high DRAM bandwidth per SM 32, 64 and 128 threads x 4): odd M, K = 576, 1000 and 3000 leave vectors past the
        // row, eps = 0 (an all-zero row's r is infinite). K = 1032 and 1544: most threads' second vector past the row
        // (129 and 193 vectors of 256), fp16 with padded strides under PDL.
        RowCase{GemmDType::kBF16, 2048, 4096, 0, 0, false, true},
        RowCase{GemmDType::kFP16, 2049, 4096, 8, 16, false, true},
        RowCase{GemmDType::kBF16, 4099, 2048, 0, 0, false, true},
        RowCase{GemmDType::kBF16, 2501, 1000, 0, 0, false, true, false, 0.0f},
        RowCase{GemmDType::kFP16, 3000, 576, 8, 16, false, true},
        RowCase{GemmDType::kBF16, 3001, 4096, 0, 0, false, false, true},
        RowCase{GemmDType::kBF16, 5000, 2048, 0, 0, false, true, true},
        RowCase{GemmDType::kBF16, 1200, 1032, 0, 0, false, true},
        RowCase{GemmDType::kFP16, 2777, 1544, 8, 16, false, true, true},
        RowCase{GemmDType::kBF16, 2222, 3000, 8, 16, false, true},
        // ActQuantParams::pdl: the streaming kernels as programmatic dependents, and the row kernel ignoring it.
        RowCase{GemmDType::kBF16, 2000, 4096, 0, 0, false, true, true},
        RowCase{GemmDType::kFP16, 300, 12288, 0, 0, false, true, true},
        RowCase{GemmDType::kBF16, 40, 16384, 0, 0, false, true, true},
        RowCase{GemmDType::kBF16, 3000, 8192, 0, 0, false, true, true},
        RowCase{GemmDType::kBF16, 6, 1000, 0, 0, true, true, true}),
    row_case_name);

// Rows whose float64 sum of squares is exact in every order (integers of a few bits times one power of two):
// the tree sum cannot differ from the CPU's sequential sum, so the match is guaranteed, not only likely.
TEST(ActQuantRmsNorm, ExactSumRows) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const int m = 8, k = 5000;
  std::vector<uint16_t> xb(size_t(m) * k), wb(k);
  std::vector<float> xf(xb.size()), wf(k);
  for (size_t i = 0; i < xb.size(); ++i) {
    const float v = std::ldexp(float(int(rng() % 255) - 127), int(i / k) - 4);
    xb[i] = float_to_bf16_bits(v);
    xf[i] = bf16_bits_to_float(xb[i]);
  }
  for (int i = 0; i < k; ++i) {
    wb[i] = float_to_bf16_bits(0.5f + float(rng() % 100) / 100.f);
    wf[i] = bf16_bits_to_float(wb[i]);
  }
  Int8Activations ref;
  QDEC_ASSERT_OK(rmsnorm_quantize_int8(xf.data(), wf.data(), m, k, 1e-6f, &ref));
  const long long ldq = (k + 15) / 16 * 16;
  DeviceBuffer dx(xb.size() * 2), dw(k * 2), dq(m * ldq), ds(m * 4), dsum(m * 4);
  QDEC_CUDA_CHECK(cudaMemcpy(dx.get(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dw.get(), wb.data(), k * 2, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemset(dq.get(), kCodePoison, dq.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));
  RmsNormQuantParams p;
  p.out = ActQuantParams{m, k, GemmDType::kBF16, dx.get(), 0, dq.as<int8_t>(), ldq, ds.as<float>(), dsum.as<int32_t>()};
  p.weight = dw.get();
  p.eps = 1e-6f;
  QDEC_ASSERT_OK(rmsnorm_quantize(p, nullptr));
  std::vector<int8_t> q(m * ldq);
  std::vector<float> s(m);
  QDEC_CUDA_CHECK(cudaMemcpy(q.data(), dq.get(), q.size(), cudaMemcpyDeviceToHost));
  QDEC_CUDA_CHECK(cudaMemcpy(s.data(), ds.get(), m * 4, cudaMemcpyDeviceToHost));
  for (int r = 0; r < m; ++r) {
    ASSERT_EQ(bits(s[r]), bits(ref.scale[r])) << "row " << r;
    for (int i = 0; i < k; ++i) ASSERT_EQ(q[r * ldq + i], ref.q[size_t(r) * k + i]) << "row " << r << " col " << i;
  }
}

// bf16 rows at the bottom of the range, where the fp32 chunk sums of squares (qdec/int8_quant.h) underflow: the square
// of a bf16 subnormal, or of a value near 2^-126, is an fp32 subnormal or 0, and the kernels must round it as the CPU
// does (no flush to zero) for the codes and scales to be the CPU's bit for bit. Rows: bf16 subnormals only; subnormals
// among normals near 2^-126; zeros with one normal 2^-100; zeros with one 1.0; N(0, 1) with a fifth of the elements
// subnormal; all zero. Each with eps 1e-6 and 0, on both CTA sets.
TEST(ActQuantRmsNorm, SubnormalAndZeroRows) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const int m = 6, k = 4096;
  std::normal_distribution<float> nd(0.f, 1.f);
  auto subnormal = [&] { return uint16_t((rng() % 2) << 15 | (1 + rng() % 127)); };  // exponent 0, mantissa != 0
  std::vector<uint16_t> xb(size_t(m) * k, 0), wb(k);
  for (int i = 0; i < k; ++i) {
    xb[i] = subnormal();
    xb[k + i] = i % 3 == 0 ? subnormal()
                           : float_to_bf16_bits(std::ldexp(1.f + float(rng() % 128) / 128.f, -126 + int(rng() % 6)));
    xb[4 * size_t(k) + i] = i % 5 == 0 ? subnormal() : float_to_bf16_bits(nd(rng));
    wb[i] = float_to_bf16_bits(0.5f + float(rng() % 100) / 100.f);
  }
  xb[2 * size_t(k) + rng() % k] = float_to_bf16_bits(std::ldexp(1.f, -100));
  xb[3 * size_t(k) + rng() % k] = float_to_bf16_bits(1.f);
  std::vector<float> xf(xb.size()), wf(k);
  for (size_t i = 0; i < xb.size(); ++i) xf[i] = bf16_bits_to_float(xb[i]);
  for (int i = 0; i < k; ++i) wf[i] = bf16_bits_to_float(wb[i]);
  const long long ldq = k;
  DeviceBuffer dx(xb.size() * 2), dw(k * 2), dq(m * ldq), ds(m * 4), dsum(m * 4);
  QDEC_CUDA_CHECK(cudaMemcpy(dx.get(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dw.get(), wb.data(), k * 2, cudaMemcpyHostToDevice));
  // vectors 0: the public entry point (the CTA set this device picks); 2 and 4: each set forced (the test hook).
  for (int vectors : {0, 2, 4}) {
    for (float eps : {1e-6f, 0.f}) {
      Int8Activations ref;
      QDEC_ASSERT_OK(rmsnorm_quantize_int8(xf.data(), wf.data(), m, k, eps, &ref));
      QDEC_CUDA_CHECK(cudaMemset(dq.get(), kCodePoison, dq.bytes()));
      QDEC_CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));
      QDEC_CUDA_CHECK(cudaMemset(dsum.get(), 0xFF, dsum.bytes()));
      RmsNormQuantParams p;
      p.out =
          ActQuantParams{m, k, GemmDType::kBF16, dx.get(), 0, dq.as<int8_t>(), ldq, ds.as<float>(), dsum.as<int32_t>()};
      p.weight = dw.get();
      p.eps = eps;
      QDEC_ASSERT_OK(vectors == 0 ? rmsnorm_quantize(p, nullptr)
                                  : act_quant_internal::rmsnorm_quantize_vectors(p, vectors, nullptr));
      std::vector<int8_t> q(m * ldq);
      std::vector<float> s(m);
      std::vector<int32_t> sum(m);
      QDEC_CUDA_CHECK(cudaMemcpy(q.data(), dq.get(), q.size(), cudaMemcpyDeviceToHost));
      QDEC_CUDA_CHECK(cudaMemcpy(s.data(), ds.get(), m * 4, cudaMemcpyDeviceToHost));
      QDEC_CUDA_CHECK(cudaMemcpy(sum.data(), dsum.get(), m * 4, cudaMemcpyDeviceToHost));
      for (int r = 0; r < m; ++r) {
        ASSERT_EQ(bits(s[r]), bits(ref.scale[r])) << "vectors " << vectors << " eps " << eps << " row " << r;
        ASSERT_EQ(sum[r], ref.row_sum[r]) << "vectors " << vectors << " eps " << eps << " row " << r;
        for (int i = 0; i < k; ++i)
          ASSERT_EQ(q[r * ldq + i], ref.q[size_t(r) * k + i])
              << "vectors " << vectors << " eps " << eps << " row " << r << " col " << i;
      }
    }
  }
}

// ---- per-block quantizer -------------------------------------------------------------------------------------------

struct BlockCase {
  GemmDType dtype;
  int rows, k, block;
  int ldx_pad;
};

class ActQuantBlocks : public ::testing::TestWithParam<BlockCase> {};

TEST_P(ActQuantBlocks, BitExact) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const BlockCase c = GetParam();
  const long long ldx = c.k + c.ldx_pad, ldq = c.k + 16;
  const int nb = c.k / c.block;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> xf(size_t(c.rows) * c.k);
  for (int r = 0; r < c.rows; ++r)
    for (int b = 0; b < nb; ++b) {
      // Per block: normal with an offset, constant, all +-0 (the tie rule), NaN / Inf mixed in, huge.
      const int kind = int(rng() % 8);
      const float mean = nd(rng) * 3.f, mag = std::pow(10.f, nd(rng));
      for (int i = 0; i < c.block; ++i) {
        float v = mean + nd(rng) * mag;
        if (kind == 1) v = mean;
        if (kind == 2) v = (rng() % 2) ? 0.f : -0.f;
        if (kind == 3 && i % 7 == 3) v = (i % 2) ? std::numeric_limits<float>::infinity() : std::nanf("");
        if (kind == 4) v = nd(rng) * (c.dtype == GemmDType::kFP16 ? 20000.f : 1e36f);
        if (kind == 5 && i % 5 == 0) v = -std::numeric_limits<float>::infinity();
        if (kind == 6) v = std::nanf("");
        xf[size_t(r) * c.k + size_t(b) * c.block + i] = v;
      }
    }
  // The values the kernel sees, in float.
  std::vector<float> xs(xf.size());
  std::vector<uint8_t> raw(size_t(c.rows) * ldx * (c.dtype == GemmDType::kFP32 ? 4 : 2), 0);
  for (int r = 0; r < c.rows; ++r)
    for (int i = 0; i < c.k; ++i) {
      const float v = xf[size_t(r) * c.k + i];
      const size_t at = size_t(r) * ldx + i;
      if (c.dtype == GemmDType::kFP32) {
        std::memcpy(raw.data() + at * 4, &v, 4);
        xs[size_t(r) * c.k + i] = v;
      } else {
        const uint16_t b = to16(v, c.dtype);
        std::memcpy(raw.data() + at * 2, &b, 2);
        xs[size_t(r) * c.k + i] = from16(b, c.dtype);
      }
    }
  Int8BlockQuant ref;
  QDEC_ASSERT_OK(quantize_int8_blocks(xs.data(), c.rows, c.k, c.block, &ref));
  DeviceBuffer dx(raw.size()), dq(size_t(c.rows) * ldq), ds(size_t(c.rows) * nb * 4), doff(ds.bytes()),
      dsum(ds.bytes());
  QDEC_CUDA_CHECK(cudaMemcpy(dx.get(), raw.data(), raw.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemset(dq.get(), 0x55, dq.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(doff.get(), 0xFF, doff.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(dsum.get(), 0x7F, dsum.bytes()));
  BlockQuantParams p;
  p.rows = c.rows;
  p.k = c.k;
  p.block = c.block;
  p.x_dtype = c.dtype;
  p.x = dx.get();
  p.ldx = ldx;
  p.q = dq.as<int8_t>();
  p.ldq = ldq;
  p.scale = ds.as<float>();
  p.offset = doff.as<float>();
  p.block_sum = dsum.as<int32_t>();
  QDEC_ASSERT_OK(quantize_blocks(p, nullptr));
  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int8_t> q(dq.bytes());
  std::vector<float> s(size_t(c.rows) * nb), o(s.size());
  std::vector<int32_t> sum(s.size());
  QDEC_CUDA_CHECK(cudaMemcpy(q.data(), dq.get(), q.size(), cudaMemcpyDeviceToHost));
  QDEC_CUDA_CHECK(cudaMemcpy(s.data(), ds.get(), ds.bytes(), cudaMemcpyDeviceToHost));
  QDEC_CUDA_CHECK(cudaMemcpy(o.data(), doff.get(), ds.bytes(), cudaMemcpyDeviceToHost));
  QDEC_CUDA_CHECK(cudaMemcpy(sum.data(), dsum.get(), ds.bytes(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (size_t i = 0; i < s.size() && bad < 10; ++i) {
    if (bits(s[i]) != bits(ref.scale[i]) || bits(o[i]) != bits(ref.offset[i]) || sum[i] != ref.block_sum[i]) {
      ADD_FAILURE() << "row " << i / nb << " block " << i % nb << ": scale " << s[i] << " / " << ref.scale[i]
                    << ", offset " << o[i] << " / " << ref.offset[i] << " (bits " << bits(o[i]) << " / "
                    << bits(ref.offset[i]) << "), sum " << sum[i] << " / " << ref.block_sum[i];
      ++bad;
    }
  }
  for (int r = 0; r < c.rows && bad < 10; ++r)
    for (long long i = 0; i < ldq && bad < 10; ++i) {
      const int got = q[size_t(r) * ldq + i];
      const int want = i < c.k ? ref.q[size_t(r) * c.k + i] : 0x55;
      if (got != want) {
        ADD_FAILURE() << "row " << r << " col " << i << ": " << got << " != " << want;
        ++bad;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ActQuantBlocks,
    ::testing::Values(BlockCase{GemmDType::kBF16, 5, 4096, 32, 0}, BlockCase{GemmDType::kBF16, 7, 4160, 64, 8},
                      BlockCase{GemmDType::kBF16, 3, 128, 128, 0}, BlockCase{GemmDType::kFP16, 9, 2048 + 96, 32, 0},
                      BlockCase{GemmDType::kFP16, 4, 8192, 128, 24}, BlockCase{GemmDType::kFP32, 6, 4096, 64, 0},
                      BlockCase{GemmDType::kFP32, 5, 14336, 128, 3}, BlockCase{GemmDType::kFP32, 100, 1024, 32, 0}),
    [](const ::testing::TestParamInfo<BlockCase>& info) {
      const BlockCase& c = info.param;
      return std::string(gemm_dtype_name(c.dtype)) + "_r" + std::to_string(c.rows) + "_k" + std::to_string(c.k) + "_b" +
             std::to_string(c.block) + "_px" + std::to_string(c.ldx_pad);
    });

// ---- errors
// ----------------------------------------------------------------------------------------------------------

// Each bad input returns InvalidArgument naming the value, and nothing is launched (the poisoned scale stays).
TEST(ActQuantErrors, BadInputsLaunchNothing) {
  QDEC_SKIP_WITHOUT_GPU();
  DeviceBuffer dx(64 * 1024 * 2), dw(1024 * 2), dq(64 * 1024 + 64), ds(64 * 4), doff(64 * 4), dsum(64 * 4);
  QDEC_CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));
  ActQuantParams good{4, 256, GemmDType::kBF16, dx.get(), 0, dq.as<int8_t>(), 256, ds.as<float>(), dsum.as<int32_t>()};
  struct Bad {
    const char* what;
    ActQuantParams p;
    const char* needle;
  };
  std::vector<Bad> bads;
  auto add = [&](const char* what, const char* needle, auto&& edit) {
    ActQuantParams p = good;
    edit(p);
    bads.push_back({what, p, needle});
  };
  add("m 0", "M 0", [](ActQuantParams& p) { p.m = 0; });
  add("k 0", "K 0", [](ActQuantParams& p) { p.k = 0; });
  add("k too big", "K 200000", [](ActQuantParams& p) { p.k = 200000; });
  add("null x", "x is null", [](ActQuantParams& p) { p.x = nullptr; });
  add("odd x", "x is not aligned", [&](ActQuantParams& p) { p.x = dx.as<char>() + 1; });
  add("ldx < k", "ldx 100", [](ActQuantParams& p) { p.ldx = 100; });
  add("null q", "q is null", [](ActQuantParams& p) { p.q = nullptr; });
  add("misaligned q", "q is not 16-byte aligned", [&](ActQuantParams& p) { p.q = dq.as<int8_t>() + 8; });
  add("ldq not x16", "ldq 264", [](ActQuantParams& p) { p.ldq = 264; });
  add("ldq < k", "ldq 128", [](ActQuantParams& p) { p.ldq = 128; });
  add("k not x16, ldq 0", "ldq 250", [](ActQuantParams& p) {
    p.k = 250;
    p.ldq = 0;
  });
  add("null scale", "scale is null", [](ActQuantParams& p) { p.scale = nullptr; });
  add("misaligned row_sum", "row_sum is not 4-byte aligned",
      [&](ActQuantParams& p) { p.row_sum = reinterpret_cast<int32_t*>(dsum.as<char>() + 2); });
  add("fp32 x", "x dtype fp32", [](ActQuantParams& p) { p.x_dtype = GemmDType::kFP32; });
  for (const Bad& b : bads) {
    const Status s = quantize_activations(b.p, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.what;
    EXPECT_NE(s.to_string().find(b.needle), std::string::npos) << b.what << ": " << s.to_string();
    RmsNormQuantParams rp;
    rp.out = b.p;
    rp.weight = dw.get();
    EXPECT_EQ(rmsnorm_quantize(rp, nullptr).code(), StatusCode::kInvalidArgument) << "rmsnorm " << b.what;
  }
  RmsNormQuantParams rp;
  rp.out = good;
  rp.weight = dw.get();
  rp.eps = -1.f;
  Status s = rmsnorm_quantize(rp, nullptr);
  EXPECT_NE(s.to_string().find("eps -1"), std::string::npos) << s.to_string();
  rp.eps = 1e-6f;
  rp.weight = nullptr;
  EXPECT_NE(rmsnorm_quantize(rp, nullptr).to_string().find("weight is null"), std::string::npos);
  rp.weight = dw.get();
  s = act_quant_internal::rmsnorm_quantize_vectors(rp, 3, nullptr);  // the test hook's own check
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("vectors per thread 3"), std::string::npos) << s.to_string();

  BlockQuantParams bp{4,
                      256,
                      64,
                      GemmDType::kBF16,
                      dx.get(),
                      0,
                      dq.as<int8_t>(),
                      0,
                      ds.as<float>(),
                      doff.as<float>(),
                      dsum.as<int32_t>()};
  BlockQuantParams b2 = bp;
  b2.block = 48;
  s = quantize_blocks(b2, nullptr);
  EXPECT_NE(s.to_string().find("block 48"), std::string::npos) << s.to_string();
  b2 = bp;
  b2.k = 288;
  b2.ldq = 288;
  s = quantize_blocks(b2, nullptr);
  EXPECT_NE(s.to_string().find("K 288 is not a multiple of the block 64"), std::string::npos) << s.to_string();
  b2 = bp;
  b2.offset = nullptr;
  EXPECT_NE(quantize_blocks(b2, nullptr).to_string().find("offset is null"), std::string::npos);
  b2 = bp;
  b2.block_sum = nullptr;
  EXPECT_NE(quantize_blocks(b2, nullptr).to_string().find("block_sum is null"), std::string::npos);

  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint32_t> sc(64);
  QDEC_CUDA_CHECK(cudaMemcpy(sc.data(), ds.get(), 64 * 4, cudaMemcpyDeviceToHost));
  for (uint32_t v : sc) ASSERT_EQ(v, 0xFFFFFFFFu) << "a rejected call wrote its output";
}

}  // namespace
}  // namespace qdec
