// W8A8 GEMMs on the GPU (qdec/w8a8_gemm.h) against the float64 references of qdec/int8_quant.h:
//   per channel: every backend forced (mma with automatic and forced split counts, cuBLASLt) and auto; M in
//     {1, 3, 16, 100, 1024}, odd N, K a multiple of 16 but not of 64, bias, Y bf16 / fp16 / fp32. The int32
//     accumulators are compared exactly (W8A8Params::acc); Y by relative L2 error, and bit for bit across backends
//     (they share the epilogue arithmetic).
//   per K-block (seed 003): blocks 32 / 64 / 128, activations quantized by the GPU quantizer (checked bit-exact
//     against the CPU first), weights by the CPU; Y by relative L2 error against w8a8_block_gemm_reference.
// Outputs are poisoned (NaN) before every launch. The documented errors launch nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "int8gemm/w8a8_wgmma.h"
#include "qdec/act_quant.h"
#include "qdec/formats.h"
#include "qdec/int8_quant.h"
#include "qdec/w8a8_gemm.h"
#include "test_util.h"

namespace qdec {
namespace {

using test::DeviceBuffer;

// Relative L2 bars per output dtype: the int32 sums are exact, so the error is the fp32 epilogue (a few ulp) plus
// the output rounding (bf16 2^-9, fp16 2^-12 relative per element, at most).
double tolerance(GemmDType d) {
  return d == GemmDType::kBF16 ? 4e-3 : d == GemmDType::kFP16 ? 6e-4 : 2e-6;
}
// The block GEMM sums its terms in fp32 across K / L blocks.
double block_tolerance(GemmDType d) {
  return d == GemmDType::kFP32 ? 2e-5 : tolerance(d);
}

std::vector<double> read_y(const DeviceBuffer& y, int m, int n, long long ldy, GemmDType d) {
  const size_t esz = d == GemmDType::kFP32 ? 4 : 2;
  std::vector<uint8_t> raw(size_t(m) * ldy * esz);
  EXPECT_EQ(cudaMemcpy(raw.data(), y.get(), raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<double> out(size_t(m) * n);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      const size_t i = size_t(r) * ldy + c;
      if (d == GemmDType::kFP32) {
        float f;
        std::memcpy(&f, raw.data() + i * 4, 4);
        out[size_t(r) * n + c] = f;
      } else {
        uint16_t b;
        std::memcpy(&b, raw.data() + i * 2, 2);
        out[size_t(r) * n + c] = d == GemmDType::kBF16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
      }
    }
  return out;
}

// Random activations with per-row magnitudes, quantized on the CPU; weights likewise.
void make_operands(std::mt19937_64& rng, int m, int n, int k, Int8Activations* x, Int8ChannelWeights* w,
                   std::vector<float>* bias) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> xf(size_t(m) * k), wf(size_t(n) * k);
  for (int r = 0; r < m; ++r) {
    const float mag = std::exp(nd(rng));
    for (int c = 0; c < k; ++c) xf[size_t(r) * k + c] = nd(rng) * mag;
  }
  for (auto& v : wf) v = 0.02f * nd(rng);
  ASSERT_TRUE(quantize_activations_int8(xf.data(), m, k, x).ok());
  ASSERT_TRUE(quantize_int8_channels(wf.data(), n, k, w).ok());
  bias->resize(n);
  for (auto& v : *bias) v = 0.5f * nd(rng);
}

struct ChannelCase {
  int m, n, k;
  W8A8Backend backend;
  int splits;
  bool bias;
  GemmDType y_dtype;
  const char* wgmma_kernel = "";  // kWgmma on a 132-SM device (H100 SXM, H200): the kernel the plan must name
};

std::string channel_name(const ::testing::TestParamInfo<ChannelCase>& info) {
  const ChannelCase& c = info.param;
  return std::string("m") + std::to_string(c.m) + "_n" + std::to_string(c.n) + "_k" + std::to_string(c.k) + "_" +
         w8a8_backend_name(c.backend) + "_s" + std::to_string(c.splits) + (c.bias ? "_bias" : "") + "_y" +
         gemm_dtype_name(c.y_dtype);
}

class W8A8Channel : public ::testing::TestWithParam<ChannelCase> {};

TEST_P(W8A8Channel, MatchesReference) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const ChannelCase c = GetParam();
  Int8Activations x;
  Int8ChannelWeights w;
  std::vector<float> bias;
  make_operands(rng, c.m, c.n, c.k, &x, &w, &bias);
  std::vector<double> ref(size_t(c.m) * c.n);
  std::vector<int32_t> ref_acc(ref.size());
  QDEC_ASSERT_OK(w8a8_gemm_reference(x, w, c.bias ? bias.data() : nullptr, ref.data(), ref_acc.data()));

  // Padded leading dimensions: ldq / ldw one 16-byte step beyond K, ldy 3 beyond N.
  const long long ldq = c.k + 16, ldw = c.k + 32, ldy = c.n + 3;
  std::vector<int8_t> xq(size_t(c.m) * ldq, 99), wq(size_t(c.n) * ldw, -99);
  for (int r = 0; r < c.m; ++r) std::memcpy(&xq[size_t(r) * ldq], &x.q[size_t(r) * c.k], c.k);
  for (int r = 0; r < c.n; ++r) std::memcpy(&wq[size_t(r) * ldw], &w.q[size_t(r) * c.k], c.k);
  const size_t ysz = c.y_dtype == GemmDType::kFP32 ? 4 : 2;
  DeviceBuffer dxq(xq.size()), dwq(wq.size()), dsx(c.m * 4), dsw(c.n * 4), db(c.n * 4), dy(size_t(c.m) * ldy * ysz),
      dacc(ref.size() * 4);
  QDEC_CUDA_CHECK(cudaMemcpy(dxq.get(), xq.data(), xq.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dwq.get(), wq.data(), wq.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dsx.get(), x.scale.data(), c.m * 4, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dsw.get(), w.scale.data(), c.n * 4, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(db.get(), bias.data(), c.n * 4, cudaMemcpyHostToDevice));
  W8A8Params p;
  p.x = Int8ActivationsView{c.m, c.k, dxq.as<int8_t>(), ldq, dsx.as<float>(), nullptr};
  p.w = Int8WeightView{c.n, c.k, dwq.as<int8_t>(), ldw, dsw.as<float>()};
  p.bias = c.bias ? db.as<float>() : nullptr;
  p.y_dtype = c.y_dtype;
  p.y = dy.get();
  p.ldy = ldy;
  p.acc = dacc.as<int32_t>();
  p.backend = c.backend;
  p.num_splits = c.splits;
  W8A8Backend used;
  int splits = 0;
  if (c.backend == W8A8Backend::kWgmma) {
    const Status st = w8a8_plan(p, &used, &splits);
    if (st.code() == StatusCode::kUnsupported) GTEST_SKIP() << st.to_string();
  }
  const char* kernel = nullptr;
  QDEC_ASSERT_OK(w8a8_plan(p, &used, &splits, &kernel));
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(std::string(kernel).empty(), used != W8A8Backend::kWgmma) << kernel;
  int dev = 0, sms = 0;
  QDEC_CUDA_CHECK(cudaGetDevice(&dev));
  QDEC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (*c.wgmma_kernel) {
    if (sms == 132) {
      EXPECT_STREQ(kernel, c.wgmma_kernel);
    } else {
      std::printf("[ NOTE ] %d SMs: the %s kernel's plan is checked on 132-SM devices only\n", sms, c.wgmma_kernel);
    }
  }
  W8A8Backend expected = c.backend;
  if (c.backend == W8A8Backend::kAuto) {  // the documented rule (qdec/w8a8_gemm.h)
    W8A8Params forced = p;
    forced.backend = W8A8Backend::kWgmma;
    int wg_splits = 0;
    const bool wgmma_ok = w8a8_plan(forced, nullptr, &wg_splits).ok();
    const long long units = static_cast<long long>((c.m + 127) / 128) * ((c.n + 127) / 128) * wg_splits;
    const long long steps = w8a8_wgmma_steps(c.m, c.n, c.k);
    const bool size = c.m >= kW8A8AutoWgmmaMinM ? steps >= kW8A8AutoWgmmaMinSteps
                      : c.m <= kW8A8AutoMmaMaxM ? c.n >= kW8A8AutoWgmmaSmallMinN && steps >= kW8A8AutoWgmmaTinyMinSteps
                                                : c.n >= kW8A8AutoWgmmaSmallMinN && steps >= kW8A8AutoWgmmaMinSteps;
    const bool take_wgmma = wgmma_ok && c.m <= kW8A8AutoWgmmaMaxM && size && 2 * units >= sms;
    expected = take_wgmma ? W8A8Backend::kWgmma : c.m <= kW8A8AutoMmaMaxM ? W8A8Backend::kMma : W8A8Backend::kCublasLt;
  }
  ASSERT_EQ(used, expected);
  size_t wsb = 0;
  QDEC_ASSERT_OK(w8a8_gemm_workspace_bytes(p, &wsb));
  DeviceBuffer ws(wsb);
  if (wsb) QDEC_CUDA_CHECK(cudaMemset(ws.get(), 0, wsb));
  p.workspace = ws.get();
  p.workspace_bytes = wsb;
  // Twice: the second call checks that the first left the split-K workspace zero.
  std::vector<double> first;
  for (int rep = 0; rep < 2; ++rep) {
    QDEC_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
    QDEC_CUDA_CHECK(cudaMemset(dacc.get(), 0x7F, dacc.bytes()));
    QDEC_ASSERT_OK(w8a8_gemm(p, nullptr));
    QDEC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int32_t> acc(ref.size());
    QDEC_CUDA_CHECK(cudaMemcpy(acc.data(), dacc.get(), dacc.bytes(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < acc.size(); ++i)
      ASSERT_EQ(acc[i], ref_acc[i]) << "rep " << rep << " int32 sum (" << i / c.n << ", " << i % c.n << "), backend "
                                    << w8a8_backend_name(used) << " splits " << splits;
    std::vector<double> y = read_y(dy, c.m, c.n, ldy, c.y_dtype);
    const double err = rel_l2(y.data(), ref.data(), y.size());
    EXPECT_LE(err, tolerance(c.y_dtype)) << "rep " << rep << " backend " << w8a8_backend_name(used) << " splits "
                                         << splits;
    if (rep == 0) first = y;
    if (rep == 1) {
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], first[i]) << "run-to-run difference at " << i;
    }
  }
}

std::vector<ChannelCase> channel_cases() {
  std::vector<ChannelCase> v;
  const GemmDType dts[] = {GemmDType::kBF16, GemmDType::kFP16, GemmDType::kFP32};
  int i = 0;
  for (int m : {1, 3, 16, 100, 1024})
    for (W8A8Backend b : {W8A8Backend::kMma, W8A8Backend::kCublasLt, W8A8Backend::kAuto}) {
      const int n = m == 1024 ? 77 : (i % 2 ? 301 : 96);
      const int k = m == 1024 ? 1040 : (i % 3 == 0 ? 4096 : i % 3 == 1 ? 1040 : 48);
      v.push_back({m, n, k, b, 0, i % 2 == 0, dts[i % 3]});
      ++i;
    }
  // Forced split counts of the mma kernel, including more splits than K chunks allow (clamped).
  v.push_back({16, 333, 4096, W8A8Backend::kMma, 1, true, GemmDType::kBF16});
  v.push_back({16, 333, 4096, W8A8Backend::kMma, 7, true, GemmDType::kFP32});
  v.push_back({40, 64, 1024, W8A8Backend::kMma, 1000, false, GemmDType::kFP32});
  v.push_back({64, 4096, 4096, W8A8Backend::kMma, 0, true, GemmDType::kBF16});
  v.push_back({33, 1000, 14336, W8A8Backend::kMma, 0, false, GemmDType::kFP16});
  // The wgmma backend (sm_90a; skips elsewhere): M, N and K tails of its 128 x 128 x 128 tiles, several stage
  // rounds, every output dtype, bias on and off.
  v.push_back({1, 96, 48, W8A8Backend::kWgmma, 0, true, GemmDType::kBF16});
  v.push_back({100, 301, 1040, W8A8Backend::kWgmma, 0, false, GemmDType::kFP16});
  v.push_back({1024, 77, 1040, W8A8Backend::kWgmma, 0, true, GemmDType::kFP32});
  v.push_back({300, 700, 4096, W8A8Backend::kWgmma, 0, true, GemmDType::kBF16, "pingpong"});
  v.push_back({129, 257, 4112, W8A8Backend::kWgmma, 0, false, GemmDType::kFP32});
  // Its split-K (partials through the workspace, the last split reduces): forced 3 and 1000 (clamped to the 9
  // k-tiles), and the automatic count on a shape with few tiles (1024 x 1280 x 8192: 40 tiles).
  v.push_back({300, 520, 4112, W8A8Backend::kWgmma, 3, true, GemmDType::kBF16});
  v.push_back({130, 300, 1040, W8A8Backend::kWgmma, 1000, false, GemmDType::kFP16});
  v.push_back({1024, 1280, 8192, W8A8Backend::kWgmma, 0, true, GemmDType::kBF16});
  // The cooperative kernel (128 x 256 tiles; wgmma_plan takes it for K >= 8192 with 0.9-2 of its tiles per SM on
  // an H100 / H200): one tile per SM, and M, N and K tails.
  v.push_back({1024, 4096, 8192, W8A8Backend::kWgmma, 0, true, GemmDType::kBF16, "cooperative"});
  v.push_back({1000, 4000, 8208, W8A8Backend::kWgmma, 0, false, GemmDType::kFP32, "cooperative"});
  // The 128 x 160 tiles (wgmma_plan takes them where 128 x 128 tiles need more rounds of the SMs: 320 tiles in 3
  // rounds against 256 in 2 at N = 1280, M = 4096 on 132 SMs): exact tiles, and M, N and K tails (N = 1240 leaves a
  // 120-column last tile).
  v.push_back({4096, 1280, 256, W8A8Backend::kWgmma, 0, true, GemmDType::kBF16, "pingpong-n160"});
  v.push_back({4000, 1240, 272, W8A8Backend::kWgmma, 0, false, GemmDType::kFP16, "pingpong-n160"});
  v.push_back({4000, 1240, 272, W8A8Backend::kWgmma, 0, true, GemmDType::kFP32, "pingpong-n160"});
  // More units than SMs: the persistent CTAs take several tiles (and splits) each, the ring running on across them.
  v.push_back({2048, 4352, 256, W8A8Backend::kWgmma, 0, true, GemmDType::kFP16});
  v.push_back({1200, 2600, 1040, W8A8Backend::kWgmma, 2, false, GemmDType::kBF16});
  // kAuto at the wgmma thresholds (1 x 16 x 48 = kW8A8AutoWgmmaMinSteps tile steps, 32 tiles of 128 x 128 in 4
  // splits): wgmma on sm_90a at M = kW8A8AutoWgmmaMinM .. 128, cuBLASLt elsewhere and below; one K step fewer
  // (K = 6016) is under the bound.
  v.push_back({128, 4096, 6144, W8A8Backend::kAuto, 0, true, GemmDType::kBF16});
  v.push_back({kW8A8AutoWgmmaMinM, 4096, 6144, W8A8Backend::kAuto, 0, false, GemmDType::kFP16});
  v.push_back({kW8A8AutoWgmmaMinM - 1, 4096, 6144, W8A8Backend::kAuto, 0, true, GemmDType::kBF16});
  v.push_back({128, 4096, 6016, W8A8Backend::kAuto, 0, true, GemmDType::kBF16});
  // Below kW8A8AutoWgmmaMinM only N >= kW8A8AutoWgmmaSmallMinN takes wgmma: from M = 17 with 1 x 32 x 24 =
  // kW8A8AutoWgmmaMinSteps at K = 3072 (one K step fewer is under it), at M <= kW8A8AutoMmaMaxM with 1 x 32 x 112 =
  // kW8A8AutoWgmmaTinyMinSteps at K = 14336 (else kMma there).
  v.push_back({48, 8192, 8192, W8A8Backend::kAuto, 0, false, GemmDType::kBF16});
  v.push_back({kW8A8AutoMmaMaxM + 1, 8192, 3072, W8A8Backend::kAuto, 0, true, GemmDType::kBF16});
  v.push_back({kW8A8AutoMmaMaxM + 1, 8192, 2944, W8A8Backend::kAuto, 0, false, GemmDType::kBF16});
  v.push_back({kW8A8AutoWgmmaMinM - 1, 8064, 3072, W8A8Backend::kAuto, 0, true, GemmDType::kFP16});
  v.push_back({kW8A8AutoMmaMaxM, 8192, 8192, W8A8Backend::kAuto, 0, true, GemmDType::kBF16});
  v.push_back({1, 8192, 14336, W8A8Backend::kAuto, 0, true, GemmDType::kFP16});
  v.push_back({1, 8192, 14208, W8A8Backend::kAuto, 0, false, GemmDType::kBF16});
  v.push_back({1, 8064, 14336, W8A8Backend::kAuto, 0, false, GemmDType::kBF16});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, W8A8Channel, ::testing::ValuesIn(channel_cases()), channel_name);

// Both backends give the same bits (shared epilogue arithmetic on exact int32 sums).
TEST(W8A8ChannelBackends, BitIdentical) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const int m = 37, n = 515, k = 2064;
  Int8Activations x;
  Int8ChannelWeights w;
  std::vector<float> bias;
  make_operands(rng, m, n, k, &x, &w, &bias);
  DeviceBuffer dxq(x.q.size()), dwq(w.q.size()), dsx(m * 4), dsw(n * 4), db(n * 4), dy(size_t(m) * n * 4);
  QDEC_CUDA_CHECK(cudaMemcpy(dxq.get(), x.q.data(), x.q.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dwq.get(), w.q.data(), w.q.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dsx.get(), x.scale.data(), m * 4, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dsw.get(), w.scale.data(), n * 4, cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(db.get(), bias.data(), n * 4, cudaMemcpyHostToDevice));
  std::vector<std::vector<uint32_t>> outs;
  for (W8A8Backend b : {W8A8Backend::kMma, W8A8Backend::kCublasLt, W8A8Backend::kWgmma}) {
    W8A8Params p;
    p.x = Int8ActivationsView{m, k, dxq.as<int8_t>(), 0, dsx.as<float>(), nullptr};
    p.w = Int8WeightView{n, k, dwq.as<int8_t>(), 0, dsw.as<float>()};
    p.bias = db.as<float>();
    p.y_dtype = GemmDType::kFP32;
    p.y = dy.get();
    p.backend = b;
    if (b == W8A8Backend::kWgmma && w8a8_plan(p, nullptr, nullptr).code() == StatusCode::kUnsupported) break;
    size_t wsb = 0;
    QDEC_ASSERT_OK(w8a8_gemm_workspace_bytes(p, &wsb));
    DeviceBuffer ws(wsb);
    if (wsb) QDEC_CUDA_CHECK(cudaMemset(ws.get(), 0, wsb));
    p.workspace = ws.get();
    p.workspace_bytes = wsb;
    QDEC_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
    QDEC_ASSERT_OK(w8a8_gemm(p, nullptr));
    QDEC_CUDA_CHECK(cudaDeviceSynchronize());
    outs.emplace_back(size_t(m) * n);
    QDEC_CUDA_CHECK(cudaMemcpy(outs.back().data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
  }
  for (size_t o = 1; o < outs.size(); ++o)
    for (size_t i = 0; i < outs[0].size(); ++i)
      ASSERT_EQ(outs[0][i], outs[o][i]) << "backend " << o << ", element " << i;
}

// kWgmma is planned only on sm_90 (with sm_90a code in the library): elsewhere w8a8_plan returns a Status that
// says why (no device, or the device's architecture) and w8a8_gemm launches nothing. Runs with or without a GPU.
TEST(W8A8Wgmma, PlannedOnlyOnSm90) {
  // Plausible aligned addresses: planning validates pointers but never dereferences them.
  int8_t* const q = reinterpret_cast<int8_t*>(uintptr_t{1} << 20);
  float* const f = reinterpret_cast<float*>(uintptr_t{1} << 21);
  W8A8Params p;
  p.x = Int8ActivationsView{256, 1024, q, 0, f, nullptr};
  p.w = Int8WeightView{512, 1024, q, 0, f};
  p.y_dtype = GemmDType::kBF16;
  p.y = f;
  p.backend = W8A8Backend::kWgmma;
  W8A8Backend used = W8A8Backend::kAuto;
  int splits = 0;
  const Status st = w8a8_plan(p, &used, &splits);
  if (!test::gpu_unavailable_reason().empty()) {
    EXPECT_EQ(st.code(), StatusCode::kNoDevice) << st.to_string();
    EXPECT_EQ(w8a8_gemm(p, nullptr).code(), StatusCode::kNoDevice);
    return;
  }
  int dev = 0, major = 0, minor = 0;
  QDEC_CUDA_CHECK(cudaGetDevice(&dev));
  QDEC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  QDEC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (QDEC_HAS_SM90A && major == 9 && minor == 0) {
    QDEC_ASSERT_OK(st);
    EXPECT_EQ(used, W8A8Backend::kWgmma);
    EXPECT_GE(splits, 1);
  } else {
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
    EXPECT_NE(st.to_string().find("sm_90"), std::string::npos) << st.to_string();
  }
}

// ---- per K-block -------------------------------------------------------------------------------------------------

struct BlockGemmCase {
  int m, n, k, block;
  bool bias;
  GemmDType y_dtype;
};

class W8A8Block : public ::testing::TestWithParam<BlockGemmCase> {};

TEST_P(W8A8Block, MatchesReference) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const BlockGemmCase c = GetParam();
  std::normal_distribution<float> nd(0.f, 1.f);
  // Activations with a per-row mean (the offsets matter), bf16 as a layer would hand them over.
  std::vector<uint16_t> xb(size_t(c.m) * c.k);
  std::vector<float> xf(xb.size()), wf(size_t(c.n) * c.k), bias(c.n);
  for (int r = 0; r < c.m; ++r) {
    const float mean = 0.3f * nd(rng), mag = std::exp(nd(rng));
    for (int i = 0; i < c.k; ++i) {
      xb[size_t(r) * c.k + i] = float_to_bf16_bits(mean + nd(rng) * mag);
      xf[size_t(r) * c.k + i] = bf16_bits_to_float(xb[size_t(r) * c.k + i]);
    }
  }
  for (auto& v : wf) v = 0.02f * nd(rng) + 0.001f;
  for (auto& v : bias) v = nd(rng);
  Int8BlockQuant a, b;
  QDEC_ASSERT_OK(quantize_int8_blocks(xf.data(), c.m, c.k, c.block, &a));
  QDEC_ASSERT_OK(quantize_int8_blocks(wf.data(), c.n, c.k, c.block, &b));
  std::vector<double> ref(size_t(c.m) * c.n);
  QDEC_ASSERT_OK(w8a8_block_gemm_reference(a, b, c.bias ? bias.data() : nullptr, ref.data()));

  const int nb = c.k / c.block;
  const long long lda = c.k + 16;
  DeviceBuffer dx(xb.size() * 2), daq(size_t(c.m) * lda), das(size_t(c.m) * nb * 4), dao(das.bytes()),
      dasum(das.bytes());
  DeviceBuffer dbq(b.q.size()), dbs(b.scale.size() * 4), dbo(dbs.bytes()), dbsum(dbs.bytes()), dbias(c.n * 4);
  const size_t ysz = c.y_dtype == GemmDType::kFP32 ? 4 : 2;
  DeviceBuffer dy(size_t(c.m) * c.n * ysz);
  QDEC_CUDA_CHECK(cudaMemcpy(dx.get(), xb.data(), dx.bytes(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dbq.get(), b.q.data(), b.q.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dbs.get(), b.scale.data(), dbs.bytes(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dbo.get(), b.offset.data(), dbs.bytes(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dbsum.get(), b.block_sum.data(), dbs.bytes(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemcpy(dbias.get(), bias.data(), c.n * 4, cudaMemcpyHostToDevice));
  // GPU quantizer for A, checked bit-exact against the CPU's before it feeds the GEMM.
  BlockQuantParams qp{c.m,
                      c.k,
                      c.block,
                      GemmDType::kBF16,
                      dx.get(),
                      0,
                      daq.as<int8_t>(),
                      lda,
                      das.as<float>(),
                      dao.as<float>(),
                      dasum.as<int32_t>()};
  QDEC_ASSERT_OK(quantize_blocks(qp, nullptr));
  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  {
    std::vector<int8_t> q(daq.bytes());
    std::vector<float> s(size_t(c.m) * nb), o(s.size());
    QDEC_CUDA_CHECK(cudaMemcpy(q.data(), daq.get(), q.size(), cudaMemcpyDeviceToHost));
    QDEC_CUDA_CHECK(cudaMemcpy(s.data(), das.get(), das.bytes(), cudaMemcpyDeviceToHost));
    QDEC_CUDA_CHECK(cudaMemcpy(o.data(), dao.get(), dao.bytes(), cudaMemcpyDeviceToHost));
    for (int r = 0; r < c.m; ++r)
      for (int i = 0; i < c.k; ++i) ASSERT_EQ(q[size_t(r) * lda + i], a.q[size_t(r) * c.k + i]);
    for (size_t i = 0; i < s.size(); ++i) {
      ASSERT_EQ(s[i], a.scale[i]);
      ASSERT_EQ(o[i], a.offset[i]);
    }
  }
  W8A8BlockParams p;
  p.a = Int8BlockView{c.m, c.k, c.block, daq.as<int8_t>(), lda, das.as<float>(), dao.as<float>(), dasum.as<int32_t>()};
  p.b = Int8BlockView{c.n, c.k, c.block, dbq.as<int8_t>(), 0, dbs.as<float>(), dbo.as<float>(), dbsum.as<int32_t>()};
  p.bias = c.bias ? dbias.as<float>() : nullptr;
  p.y_dtype = c.y_dtype;
  p.y = dy.get();
  QDEC_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
  QDEC_ASSERT_OK(w8a8_block_gemm(p, nullptr));
  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> y = read_y(dy, c.m, c.n, c.n, c.y_dtype);
  EXPECT_LE(rel_l2(y.data(), ref.data(), y.size()), block_tolerance(c.y_dtype));
}

INSTANTIATE_TEST_SUITE_P(Shapes, W8A8Block,
                         ::testing::Values(BlockGemmCase{1, 96, 4096, 128, true, GemmDType::kBF16},
                                           BlockGemmCase{3, 301, 1024, 32, false, GemmDType::kFP32},
                                           BlockGemmCase{16, 77, 2048, 64, true, GemmDType::kFP16},
                                           BlockGemmCase{100, 130, 640, 32, true, GemmDType::kFP32},
                                           BlockGemmCase{100, 64, 4096, 128, false, GemmDType::kBF16},
                                           BlockGemmCase{1024, 45, 512, 64, true, GemmDType::kFP32}),
                         [](const ::testing::TestParamInfo<BlockGemmCase>& info) {
                           const BlockGemmCase& c = info.param;
                           return std::string("m") + std::to_string(c.m) + "_n" + std::to_string(c.n) + "_k" +
                                  std::to_string(c.k) + "_b" + std::to_string(c.block) + (c.bias ? "_bias" : "") +
                                  "_y" + gemm_dtype_name(c.y_dtype);
                         });

// ---- errors
// ----------------------------------------------------------------------------------------------------------

TEST(W8A8Errors, BadInputsLaunchNothing) {
  QDEC_SKIP_WITHOUT_GPU();
  DeviceBuffer dx(64 * 512), dw(128 * 512), ds(1024), dy(64 * 128 * 4), ws(1 << 20);
  QDEC_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
  W8A8Params good;
  good.x = Int8ActivationsView{16, 256, dx.as<int8_t>(), 0, ds.as<float>(), nullptr};
  good.w = Int8WeightView{128, 256, dw.as<int8_t>(), 0, ds.as<float>()};
  good.y_dtype = GemmDType::kFP32;
  good.y = dy.get();
  good.backend = W8A8Backend::kMma;
  good.num_splits = 2;
  good.workspace = ws.get();
  good.workspace_bytes = ws.bytes();
  struct Bad {
    const char* what;
    const char* needle;
    W8A8Params p;
  };
  std::vector<Bad> bads;
  auto add = [&](const char* what, const char* needle, auto&& edit) {
    W8A8Params p = good;
    edit(p);
    bads.push_back({what, needle, p});
  };
  add("m 0", "M 0", [](W8A8Params& p) { p.x.m = 0; });
  add("n 0", "N 0", [](W8A8Params& p) { p.w.n = 0; });
  add("m huge", "M 2000000", [](W8A8Params& p) { p.x.m = 2000000; });
  add("k mismatch", "activation K 256 does not match weight K 272", [](W8A8Params& p) { p.w.k = 272; });
  add("k not x16", "K 250", [](W8A8Params& p) {
    p.x.k = p.w.k = 250;
    p.x.ldq = p.w.ldw = 256;
  });
  add("k too big", "K 200000", [](W8A8Params& p) { p.x.k = p.w.k = 200000; });
  add("null x", "x.q is null", [](W8A8Params& p) { p.x.q = nullptr; });
  add("misaligned x", "x.q is null or not 16-byte aligned", [&](W8A8Params& p) { p.x.q = dx.as<int8_t>() + 4; });
  add("ldq not x16", "x.ldq 264", [](W8A8Params& p) { p.x.ldq = 264; });
  add("ldw < k", "w.ldw 128", [](W8A8Params& p) { p.w.ldw = 128; });
  add("null w", "w.q is null", [](W8A8Params& p) { p.w.q = nullptr; });
  add("null x scale", "x.scale is null", [](W8A8Params& p) { p.x.scale = nullptr; });
  add("null w scale", "w.scale is null", [](W8A8Params& p) { p.w.scale = nullptr; });
  add("null y", "y is null", [](W8A8Params& p) { p.y = nullptr; });
  add("ldy < n", "ldy 100", [](W8A8Params& p) { p.ldy = 100; });
  add("splits", "num_splits -1", [](W8A8Params& p) { p.num_splits = -1; });
  add("null workspace", "workspace is null", [](W8A8Params& p) { p.workspace = nullptr; });
  add("misaligned workspace", "workspace is not 256-byte aligned",
      [&](W8A8Params& p) { p.workspace = ws.as<char>() + 16; });
  for (const Bad& b : bads) {
    const Status s = w8a8_gemm(b.p, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.what << ": " << s.to_string();
    EXPECT_NE(s.to_string().find(b.needle), std::string::npos) << b.what << ": " << s.to_string();
  }
  W8A8Params small = good;
  small.workspace_bytes = 64;
  Status s = w8a8_gemm(small, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_NE(s.to_string().find("workspace_bytes 64"), std::string::npos) << s.to_string();
  small.backend = W8A8Backend::kCublasLt;
  EXPECT_EQ(w8a8_gemm(small, nullptr).code(), StatusCode::kOutOfMemory);

  W8A8BlockParams bp;
  bp.a = Int8BlockView{16, 256, 64, dx.as<int8_t>(), 0, ds.as<float>(), ds.as<float>(), ds.as<int32_t>()};
  bp.b = Int8BlockView{128, 256, 64, dw.as<int8_t>(), 0, ds.as<float>(), ds.as<float>(), ds.as<int32_t>()};
  bp.y = dy.get();
  bp.y_dtype = GemmDType::kFP32;
  W8A8BlockParams b2 = bp;
  b2.b.block = 32;
  EXPECT_NE(w8a8_block_gemm(b2, nullptr).to_string().find("blocks 64 and 32 differ"), std::string::npos);
  b2 = bp;
  b2.a.k = 288;
  b2.a.ld = 288;
  s = w8a8_block_gemm(b2, nullptr);
  EXPECT_NE(s.to_string().find("K 288 is not a multiple of the block 64"), std::string::npos) << s.to_string();
  b2 = bp;
  b2.b.k = 320;
  s = w8a8_block_gemm(b2, nullptr);
  EXPECT_NE(s.to_string().find("activation K 256 does not match weight K 320"), std::string::npos) << s.to_string();
  b2 = bp;
  b2.a.block = 16;
  b2.b.block = 16;
  EXPECT_NE(w8a8_block_gemm(b2, nullptr).to_string().find("block 16 is not supported"), std::string::npos);
  b2 = bp;
  b2.a.offset = nullptr;
  EXPECT_EQ(w8a8_block_gemm(b2, nullptr).code(), StatusCode::kInvalidArgument);
  b2 = bp;
  b2.a.ld = 264;
  EXPECT_NE(w8a8_block_gemm(b2, nullptr).to_string().find("a.ld 264"), std::string::npos);

  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint32_t> y(dy.bytes() / 4);
  QDEC_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
  for (uint32_t v : y) ASSERT_EQ(v, 0xFFFFFFFFu) << "a rejected call wrote its output";
}

// The error path of the tensor-map helper both wgmma GEMMs (W8A8, W4A8) use: the driver's rejection comes back as a
// kCudaError naming the operand, its [rows, K] and row stride. The GEMM entry points validate alignment and strides
// first, so only a direct call reaches it.
TEST(W8A8Wgmma, TensorMapErrorNamesTheOperand) {
  QDEC_SKIP_WITHOUT_GPU();
  int dev = 0, major = 0;
  QDEC_CUDA_CHECK(cudaGetDevice(&dev));
  QDEC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) GTEST_SKIP() << "tensor maps need an sm_90 device (compute capability " << major << ")";
  DeviceBuffer buf(1 << 20);
  const auto* base = buf.as<const int8_t>();
  CUtensorMap map{};
  // The arguments the W4A8 kernel passes: boxes of 64 rows x 64 bytes in the 64-byte swizzle.
  Status s = w8a8::int8_tensor_map(&map, base, 64, 256, 256, 64, 64, CU_TENSOR_MAP_SWIZZLE_64B, "probe x");
  ASSERT_TRUE(s.ok()) << s.to_string();
  // A row stride that is not a multiple of 16 bytes.
  s = w8a8::int8_tensor_map(&map, base, 64, 256, 264, 64, 64, CU_TENSOR_MAP_SWIZZLE_64B, "probe x");
  EXPECT_EQ(s.code(), StatusCode::kCudaError) << s.to_string();
  EXPECT_NE(s.to_string().find("cuTensorMapEncodeTiled(probe x, [64, 256], ld 264)"), std::string::npos)
      << s.to_string();
  // A box of more than 256 rows.
  s = w8a8::int8_tensor_map(&map, base, 512, 256, 256, 64, 300, CU_TENSOR_MAP_SWIZZLE_64B, "probe w");
  EXPECT_EQ(s.code(), StatusCode::kCudaError) << s.to_string();
  EXPECT_NE(s.to_string().find("cuTensorMapEncodeTiled(probe w, [512, 256], ld 256)"), std::string::npos)
      << s.to_string();
}

}  // namespace
}  // namespace qdec
