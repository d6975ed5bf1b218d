// The W4A8 (QoQ) GEMM on the GPU against the float64 references w4a8_group_gemm_reference /
// w4a8_channel_gemm_reference (on the same int8 activations and uint4 weights): groups 32/64/128 and the
// per-channel scheme, M in {1, 3, 16, 100, 1024}, odd N, several K, every configuration forced (the dequantize +
// W8A8 path with each W8A8 backend; the wgmma paths on sm_90, also bit for bit against the mma kernel), forced and
// automatic split-K, bias, Y bf16/fp16/fp32, padded ldq/ldy. Every case runs twice (the workspace's split-K state zone
// must be left at zero), the output is poisoned (NaN) before each launch. Bad inputs return a Status naming the value
// and launch nothing. GPU cases skip, with the reason, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "qdec/formats.h"
#include "qdec/w4a8_gemm.h"
#include "qdec/workspace.h"
#include "test_util.h"

namespace qdec {
namespace {

using test::DeviceBuffer;

constexpr double kTol = 5e-3;  // the bar for every output dtype
// fp32 Y: the int32 sums are exact, so only the epilogue's fp32 roundings (int32 -> fp32, s_x * s, one FMA)
// remain: a few 6e-8 relative steps.
constexpr double kTolFp32 = 1e-6;

struct Case {
  int group_size;  // 0: per channel
  int m, n, k;
  W4A8Path path = W4A8Path::kAuto;
  int splits = 0;
  bool bias = false;
  W8A8Backend w8a8 = W8A8Backend::kAuto;   // kDequantW8A8's backend
  W4A8Path expect_path = W4A8Path::kAuto;  // with path kAuto: the path it must resolve to (kAuto: not checked)
  GemmDType y_dtype = GemmDType::kBF16;
  int ldq_pad = 0, ldy_pad = 0;
};

std::string describe(const Case& c) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "g%d m%d n%d k%d path %s (w8a8 %s) splits %d bias %d y %s ldq+%d ldy+%d",
                c.group_size, c.m, c.n, c.k, w4a8_path_name(c.path), w8a8_backend_name(c.w8a8), c.splits, int(c.bias),
                gemm_dtype_name(c.y_dtype), c.ldq_pad, c.ldy_pad);
  return buf;
}

// Weights with a per-row spread and offset (so that zeros and group scales vary), activations with a few
// large outliers per row (so that the per-token scales matter).
std::vector<float> make_weights(std::mt19937_64& rng, int n, int k) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> w(size_t(n) * k);
  for (int r = 0; r < n; ++r) {
    const float sc = 0.02f * (0.5f + std::abs(nd(rng))), off = 0.01f * nd(rng);
    for (int c = 0; c < k; ++c) w[size_t(r) * k + c] = sc * nd(rng) + off;
  }
  return w;
}
std::vector<float> make_activations(std::mt19937_64& rng, int m, int k) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> col(0, k - 1);
  std::vector<float> x(size_t(m) * k);
  for (auto& v : x) v = nd(rng);
  for (int r = 0; r < m; ++r) x[size_t(r) * k + col(rng)] *= 20.0f;
  return x;
}

double read_y(const std::vector<uint8_t>& y, GemmDType d, size_t i) {
  if (d == GemmDType::kFP32) {
    float v;
    std::memcpy(&v, y.data() + 4 * i, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, y.data() + 2 * i, 2);
  return d == GemmDType::kBF16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
}

// The wgmma paths need an sm_90 device and a build with sm_90a code (kUnsupported elsewhere); tests leave them out
// there, saying so.
bool sm90_device() {
  int dev = 0, major = 0, minor = 0;
  if (!QDEC_HAS_SM90A || cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}
bool is_wgmma(W4A8Path p) {
  return p == W4A8Path::kWgmma64 || p == W4A8Path::kWgmma128 || p == W4A8Path::kWgmma256;
}
bool skip_path(W4A8Path p) {
  if (!is_wgmma(p) || sm90_device()) return false;
  std::printf("[w4a8] path %s left out: not an sm_90 device, or no sm_90a code in this build\n", w4a8_path_name(p));
  return true;
}

// Runs one case twice; returns the worse relative L2 error (and fails the test above the bar). y_out, if given,
// receives the output bytes of the second run ([M, ldy] of the Y dtype).
double run_case(const Case& c, std::mt19937_64& rng, std::vector<uint8_t>* y_out = nullptr) {
  SCOPED_TRACE(describe(c));
  const std::vector<float> wf = make_weights(rng, c.n, c.k);
  const std::vector<float> xf = make_activations(rng, c.m, c.k);
  Int8Activations xa;
  EXPECT_TRUE(quantize_activations_int8(xf.data(), c.m, c.k, &xa).ok());
  std::vector<float> bias(c.n);
  for (auto& b : bias) b = std::normal_distribution<float>(0.f, 0.5f)(rng);
  std::vector<double> ref(size_t(c.m) * c.n);
  W4A8Packed packed;
  if (c.group_size) {
    QoQGroupWeights w;
    EXPECT_TRUE(qoq_quantize_weights(wf.data(), c.n, c.k, c.group_size, &w).ok());
    EXPECT_TRUE(w4a8_group_gemm_reference(xa, w, c.bias ? bias.data() : nullptr, ref.data()).ok());
    EXPECT_TRUE(w4a8_prepack(w, &packed).ok());
  } else {
    QoQChannelWeights w;
    EXPECT_TRUE(qoq_quantize_channels(wf.data(), c.n, c.k, &w).ok());
    EXPECT_TRUE(w4a8_channel_gemm_reference(xa, w, c.bias ? bias.data() : nullptr, ref.data()).ok());
    EXPECT_TRUE(w4a8_prepack(w, &packed).ok());
  }
  if (::testing::Test::HasFailure()) return INFINITY;

  const long long ldq = c.k + c.ldq_pad, ldy = c.n + c.ldy_pad;
  const size_t ysize = c.y_dtype == GemmDType::kFP32 ? 4 : 2;
  DeviceBuffer d_w(packed.data.size()), d_xq(size_t(c.m) * ldq), d_sx(4 * c.m), d_rs(4 * c.m), d_bias(4 * c.n),
      d_y(size_t(c.m) * ldy * ysize);
  std::vector<int8_t> xq(size_t(c.m) * ldq, 0x55);  // padding columns hold garbage the kernel must not read
  for (int r = 0; r < c.m; ++r) std::memcpy(xq.data() + size_t(r) * ldq, xa.q.data() + size_t(r) * c.k, c.k);
  EXPECT_EQ(cudaMemcpy(d_w.get(), packed.data.data(), packed.data.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_xq.get(), xq.data(), xq.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_sx.get(), xa.scale.data(), 4 * c.m, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_rs.get(), xa.row_sum.data(), 4 * c.m, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_bias.get(), bias.data(), 4 * c.n, cudaMemcpyHostToDevice), cudaSuccess);

  W4A8Params p;
  p.x.m = c.m;
  p.x.k = c.k;
  p.x.q = d_xq.as<int8_t>();
  p.x.ldq = ldq;
  p.x.scale = d_sx.as<float>();
  p.x.row_sum = c.group_size ? nullptr : d_rs.as<int32_t>();  // the group scheme must not need them
  p.w = {c.n, c.k, c.group_size, d_w.get(), packed.data.size()};
  p.bias = c.bias ? d_bias.as<float>() : nullptr;
  p.y_dtype = c.y_dtype;
  p.y = d_y.get();
  p.ldy = ldy;
  p.path = c.path;
  p.num_splits = c.splits;
  p.w8a8_backend = c.w8a8;
  size_t ws = 0;
  EXPECT_TRUE(w4a8_gemm_workspace_bytes(p, &ws).ok());
  DeviceBuffer d_ws(ws);
  if (ws) {
    EXPECT_EQ(cudaMemset(d_ws.get(), 0, ws), cudaSuccess);
  }
  p.workspace = d_ws.get();
  p.workspace_bytes = ws;
  W4A8Path path;
  W8A8Backend w8a8 = W8A8Backend::kAuto;
  int splits = 0;
  EXPECT_TRUE(w4a8_gemm_plan(p, &path, &splits, &w8a8).ok());
  if (const W4A8Path want = c.path != W4A8Path::kAuto ? c.path : c.expect_path; want != W4A8Path::kAuto) {
    EXPECT_EQ(path, want) << "resolved " << w4a8_path_name(path) << ", expected " << w4a8_path_name(want);
  }
  if (path == W4A8Path::kDequantW8A8) {
    EXPECT_GT(ws, kWorkspaceStateBytes);  // the int8 weights live past the state zone
    if (c.w8a8 != W8A8Backend::kAuto) {
      EXPECT_EQ(w8a8, c.w8a8);
    }
  } else if (c.splits > 0) {
    EXPECT_EQ(splits, std::min(c.splits, c.k / 64));
  }

  double worst = 0.0;
  std::vector<uint8_t> y(size_t(c.m) * ldy * ysize);
  std::vector<double> got(size_t(c.m) * c.n);
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_EQ(cudaMemset(d_y.get(), 0xFF, d_y.bytes()), cudaSuccess);  // NaN in every dtype
    const Status s = w4a8_gemm(p, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(y.data(), d_y.get(), y.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int r = 0; r < c.m; ++r)
      for (int j = 0; j < c.n; ++j) got[size_t(r) * c.n + j] = read_y(y, c.y_dtype, size_t(r) * ldy + j);
    const double err = rel_l2(got.data(), ref.data(), got.size());
    const double tol = c.y_dtype == GemmDType::kFP32 ? kTolFp32 : kTol;
    EXPECT_LE(err, tol) << "rep " << rep << " (resolved path " << w4a8_path_name(path) << ", w8a8 "
                        << w8a8_backend_name(w8a8) << ", splits " << splits << ")";
    worst = std::max(worst, err);
    // Columns past N inside ldy stay poisoned: the kernel writes only [M, N].
    if (c.ldy_pad > 0) {
      EXPECT_TRUE(std::isnan(read_y(y, c.y_dtype, size_t(ldy) - 1)));
    }
  }
  if (y_out) *y_out = y;
  if (ws) {  // the split-K state zone is left zero for the next call (scratch past it may hold anything)
    std::vector<uint8_t> wsb(std::min(ws, kWorkspaceStateBytes));
    EXPECT_EQ(cudaMemcpy(wsb.data(), d_ws.get(), wsb.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    size_t nonzero = 0;
    for (uint8_t b : wsb) nonzero += b != 0;
    EXPECT_EQ(nonzero, 0u) << "state-zone bytes left nonzero";
  }
  return worst;
}

constexpr W4A8Path kPaths[] = {W4A8Path::kTokens8,  W4A8Path::kTokens16,  W4A8Path::kTokens32,
                               W4A8Path::kTokens64, W4A8Path::kTokens128, W4A8Path::kDequantW8A8,
                               W4A8Path::kWgmma64,  W4A8Path::kWgmma128,  W4A8Path::kWgmma256};

// Every configuration x M in {1, 3, 16, 100} for one scheme; split counts, bias and Y dtype rotate.
void every_path(int gs) {
  QDEC_TEST_RNG(rng);
  const GemmDType dts[] = {GemmDType::kBF16, GemmDType::kFP16, GemmDType::kFP32};
  int i = 0;
  double worst32 = 0, worst16 = 0;
  for (W4A8Path path : kPaths)
    for (int m : {1, 3, 16, 100}) {
      if (skip_path(path)) break;
      Case c{gs, m, 257, 384};
      c.path = path;
      c.splits = (i % 3 == 0) ? 1 : (i % 3 == 1) ? 0 : 3;
      c.bias = i % 2;
      c.y_dtype = dts[i % 3];
      ++i;
      const double e = run_case(c, rng);
      if (c.y_dtype == GemmDType::kFP32) {
        worst32 = std::max(worst32, e);
      } else {
        worst16 = std::max(worst16, e);
      }
      if (::testing::Test::HasFailure()) return;
    }
  std::printf("[w4a8] group %d, every path: worst rel L2 fp32 Y %.3g, bf16/fp16 Y %.3g\n", gs, worst32, worst16);
}

TEST(W4A8Gpu, EveryPathGroup128) {
  QDEC_SKIP_WITHOUT_GPU();
  every_path(128);
}
TEST(W4A8Gpu, EveryPathGroup64) {
  QDEC_SKIP_WITHOUT_GPU();
  every_path(64);
}
TEST(W4A8Gpu, EveryPathGroup32) {
  QDEC_SKIP_WITHOUT_GPU();
  every_path(32);
}
TEST(W4A8Gpu, EveryPathPerChannel) {
  QDEC_SKIP_WITHOUT_GPU();
  every_path(0);
}

TEST(W4A8Gpu, LargeMAndShapes) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  double worst32 = 0;
  for (int gs : {128, 0}) {
    for (W4A8Path path : {W4A8Path::kAuto, W4A8Path::kTokens64, W4A8Path::kTokens128, W4A8Path::kWgmma64,
                          W4A8Path::kWgmma128, W4A8Path::kWgmma256}) {
      if (skip_path(path)) continue;
      Case c{gs, 1024, 257, 1024};
      c.path = path;
      c.bias = true;
      c.y_dtype = GemmDType::kFP32;
      worst32 = std::max(worst32, run_case(c, rng));
    }
  }
  // Odd N and K, a decode shape with many splits, padded strides, fp16/bf16 Y.
  for (const Case& c0 :
       {Case{128, 1, 4097, 4096}, Case{128, 3, 1001, 640}, Case{64, 16, 129, 2048}, Case{32, 100, 33, 192},
        Case{0, 1, 999, 4096}, Case{0, 17, 511, 1536}, Case{128, 300, 1000, 768}}) {
    Case c = c0;
    c.bias = true;
    c.y_dtype = GemmDType::kFP32;
    c.ldq_pad = 32;
    c.ldy_pad = 3;
    worst32 = std::max(worst32, run_case(c, rng));
    c.y_dtype = GemmDType::kBF16;
    c.ldq_pad = 0;
    c.ldy_pad = 0;
    run_case(c, rng);
  }
  std::printf("[w4a8] large M and shapes: worst rel L2 fp32 Y %.3g\n", worst32);
}

// Runs `ref` and `wg` on the same random inputs (drawn from rng) and expects bit-identical outputs.
void expect_same_outputs(const Case& ref, const Case& wg, std::mt19937_64& rng) {
  std::mt19937_64 rng_same = rng;  // the same inputs for both runs
  std::vector<uint8_t> y_ref, y_wg;
  run_case(ref, rng, &y_ref);
  run_case(wg, rng_same, &y_wg);
  ASSERT_EQ(y_ref.size(), y_wg.size());
  const size_t es = wg.y_dtype == GemmDType::kFP32 ? 4 : 2;
  size_t differ = 0;
  for (size_t b = 0; b + es <= y_ref.size(); b += es) differ += std::memcmp(&y_ref[b], &y_wg[b], es) != 0;
  EXPECT_EQ(differ, 0u) << describe(wg) << ": outputs differing from " << w4a8_path_name(ref.path);
}

// The wgmma kernel computes the mma kernel's int32 sums and applies the same epilogue, so its fp32 output must be
// bit for bit the t64 path's (one split): token tiles with and without a tail, several columns, forced and
// automatic split-K, every scheme.
TEST(W4A8Gpu, WgmmaBitwiseAsMma) {
  QDEC_SKIP_WITHOUT_GPU();
  if (!sm90_device()) GTEST_SKIP() << "the wgmma paths need an sm_90 device and sm_90a code in the build";
  QDEC_TEST_RNG(rng);
  int i = 0;
  for (int gs : {128, 32, 0})
    // The last shape's wg64 and wg128 grids exceed the SM count (45 columns x 5 / 3 token tiles, 132 SMs): CTAs then
    // share the SMs and each CTA one X ring; the others' grids fit one CTA per SM (the one-CTA reservation), whose
    // warpgroups stream X through a ring each.
    for (const Case& c0 : {Case{gs, 64, 1000, 1024}, Case{gs, 100, 257, 384}, Case{gs, 256, 520, 2048},
                           Case{gs, 300, 130, 640}, Case{gs, 1, 33, 384}, Case{gs, 300, 5700, 512}})
      for (W4A8Path path : {W4A8Path::kWgmma64, W4A8Path::kWgmma128, W4A8Path::kWgmma256}) {
        Case ref = c0, wg = c0;
        ref.bias = wg.bias = true;
        // Every output type (the wgmma kernel stores bf16 / fp16 through shared memory as 16-byte vectors, fp32 and
        // rows whose stride is not a multiple of 8 elements directly), N % 8 != 0 among the shapes.
        const GemmDType types[3] = {GemmDType::kFP32, GemmDType::kBF16, GemmDType::kFP16};
        ref.y_dtype = wg.y_dtype = types[(i + i / 3) % 3];  // every (type, split) pair
        // Row strides: N, N + 8, N rounded up to 8 (the last vector of a row partial), N + 3.
        ref.ldy_pad = wg.ldy_pad = i % 4 == 3 ? 3 : i % 4 == 1 ? 8 : i % 4 == 2 ? (8 - c0.n % 8) % 8 : 0;
        ref.path = W4A8Path::kTokens64;
        ref.splits = 1;
        wg.path = path;
        wg.splits = (i % 3 == 0) ? 1 : (i % 3 == 1) ? 0 : 3;
        ++i;
        expect_same_outputs(ref, wg, rng);
        if (::testing::Test::HasFailure()) return;
      }
}

// Split-K on the wgmma paths: 2 to 8 splits of a grid that fits the SMs run as clusters that add their partials
// through distributed shared memory, 16 splits through the workspace and a ticket; bit for bit the t64 kernel's
// outputs either way (int32 partials).
TEST(W4A8Gpu, WgmmaSplitKClustersBitwiseAsMma) {
  QDEC_SKIP_WITHOUT_GPU();
  if (!sm90_device()) GTEST_SKIP() << "the wgmma paths need an sm_90 device and sm_90a code in the build";
  QDEC_TEST_RNG(rng);
  int i = 0;
  for (int gs : {128, 0})
    for (W4A8Path path : {W4A8Path::kWgmma64, W4A8Path::kWgmma128, W4A8Path::kWgmma256})
      for (int splits : {2, 3, 4, 5, 8, 16}) {
        Case ref{gs, 300, 1000, 2048}, wg = ref;
        ref.bias = wg.bias = true;
        ref.y_dtype = wg.y_dtype = i % 3 == 0 ? GemmDType::kFP32 : i % 3 == 1 ? GemmDType::kBF16 : GemmDType::kFP16;
        ++i;
        ref.path = W4A8Path::kTokens64;
        ref.splits = 1;
        wg.path = path;
        wg.splits = splits;
        expect_same_outputs(ref, wg, rng);
        if (::testing::Test::HasFailure()) return;
      }
}

// kAuto's choice of the wgmma kernel on sm_90, by M and weight size (N x K); planning only (the pointers are never
// read, nothing is launched).
TEST(W4A8Gpu, AutoWgmmaByMAndWeights) {
  QDEC_SKIP_WITHOUT_GPU();
  if (!sm90_device()) GTEST_SKIP() << "the wgmma paths need an sm_90 device and sm_90a code in the build";
  struct Want {
    int m, n, k;
    W4A8Path path;
    int group = 128;  // 0: qoq-c
  };
  const Want wants[] = {{16, 28672, 4096, W4A8Path::kTokens16},     {17, 28672, 4096, W4A8Path::kWgmma64},
                        {32, 16384, 4096, W4A8Path::kWgmma64},      {32, 16383, 4096, W4A8Path::kTokens32},
                        {32, 7168, 4096, W4A8Path::kWgmma64, 0},    {32, 7167, 4096, W4A8Path::kTokens32, 0},
                        {32, 4096, 4096, W4A8Path::kTokens32},      {33, 1280, 8192, W4A8Path::kWgmma64},
                        {48, 4096, 4096, W4A8Path::kWgmma64},       {64, 28672, 4096, W4A8Path::kWgmma64},
                        {64, 1279, 8192, W4A8Path::kTokens64},      {65, 28672, 4096, W4A8Path::kWgmma128},
                        {128, 8192, 8192, W4A8Path::kWgmma128},     {128, 4096, 14336, W4A8Path::kWgmma128},
                        {128, 4096, 4096, W4A8Path::kWgmma128},     {128, 1280, 8192, W4A8Path::kWgmma128},
                        {100, 1279, 8192, W4A8Path::kTokens64},     {129, 28672, 4096, W4A8Path::kWgmma256},
                        {129, 6144, 4096, W4A8Path::kWgmma256},     {129, 6143, 4096, W4A8Path::kWgmma128},
                        {256, 4096, 14336, W4A8Path::kWgmma128},    {256, 6144, 4096, W4A8Path::kWgmma256},
                        {200, 1280, 8192, W4A8Path::kWgmma128},     {200, 1279, 8192, W4A8Path::kDequantW8A8},
                        {200, 6144, 2048, W4A8Path::kWgmma128},     {257, 28672, 4096, W4A8Path::kWgmma256},
                        {200, 16384, 4096, W4A8Path::kWgmma256},    {1024, 6144, 4096, W4A8Path::kWgmma256},
                        {2048, 4096, 4096, W4A8Path::kWgmma256},    {2049, 28672, 4096, W4A8Path::kDequantW8A8},
                        {1024, 1280, 8192, W4A8Path::kDequantW8A8}, {100, 4095, 4096, W4A8Path::kWgmma128}};
  const uintptr_t fake = 256;  // aligned, non-null
  for (const Want& w : wants) {
    W4A8Params p;
    p.x = Int8ActivationsView{w.m,
                              w.k,
                              reinterpret_cast<const int8_t*>(fake),
                              w.k,
                              reinterpret_cast<const float*>(fake),
                              w.group == 0 ? reinterpret_cast<const int32_t*>(fake) : nullptr};
    p.w = W4A8WeightView{w.n, w.k, w.group, reinterpret_cast<const void*>(fake), size_t(1) << 40};
    p.y = reinterpret_cast<void*>(fake);
    W4A8Path path = W4A8Path::kAuto;
    int splits = 0;
    const Status st = w4a8_gemm_plan(p, &path, &splits);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(path, w.path) << "M " << w.m << " N " << w.n << " K " << w.k << " group " << w.group << ": "
                            << w4a8_path_name(path) << ", expected " << w4a8_path_name(w.path);
  }
  // The wgmma kernel numbers (column, token tile) in one grid dimension: more than 2^31 - 1 tiles are refused.
  W4A8Params p;
  p.x = Int8ActivationsView{
      4000000, 64, reinterpret_cast<const int8_t*>(fake), 64, reinterpret_cast<const float*>(fake), nullptr};
  p.w = W4A8WeightView{4500000, 64, 64, reinterpret_cast<const void*>(fake), size_t(1) << 40};
  p.y = reinterpret_cast<void*>(fake);
  p.path = W4A8Path::kWgmma64;
  W4A8Path path;
  int splits = 0;
  const Status st = w4a8_gemm_plan(p, &path, &splits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("M 4000000 x N 4500000 needs more than 2^31 - 1 CTA tiles"), std::string::npos)
      << st.to_string();
}

// The dequantize + W8A8 path on each W8A8 backend (kWgmma where the build and device have it), both schemes, M
// across the backends' tile sizes, forced and automatic splits, odd N, padded strides.
TEST(W4A8Gpu, DequantW8A8EveryBackend) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  double worst32 = 0;
  int i = 0;
  for (W8A8Backend b : {W8A8Backend::kMma, W8A8Backend::kCublasLt, W8A8Backend::kWgmma}) {
    if (b == W8A8Backend::kWgmma) {
      W8A8Params q;  // planning only: is the wgmma backend here?
      alignas(256) static uint8_t host[256];
      q.x = Int8ActivationsView{
          300, 256, reinterpret_cast<const int8_t*>(host), 0, reinterpret_cast<const float*>(host), nullptr};
      q.w = Int8WeightView{64, 256, reinterpret_cast<const int8_t*>(host), 0, reinterpret_cast<const float*>(host)};
      q.y = host;
      q.backend = b;
      W8A8Backend u;
      int sp = 0;
      const Status st = w8a8_plan(q, &u, &sp);
      if (!st.ok()) {
        std::printf("[ INFO ] wgmma backend: %s; its cases are left out\n", st.to_string().c_str());
        continue;
      }
    }
    for (int gs : {128, 0, 64})
      for (const Case& c0 : {Case{gs, 5, 257, 384}, Case{gs, 100, 130, 1024}, Case{gs, 300, 1001, 512}}) {
        Case c = c0;
        c.path = W4A8Path::kDequantW8A8;
        c.w8a8 = b;
        c.splits = b == W8A8Backend::kCublasLt ? 0 : (i % 2 ? 3 : 0);
        c.bias = i % 2 == 0;
        c.y_dtype = GemmDType::kFP32;
        c.ldq_pad = i % 3 == 0 ? 16 : 0;
        c.ldy_pad = i % 3 == 1 ? 5 : 0;
        ++i;
        worst32 = std::max(worst32, run_case(c, rng));
        if (::testing::Test::HasFailure()) return;
      }
  }
  // kAuto at and above kW4A8AutoDequantMinM resolves to this path (run_case reports the resolved path).
  Case c{128, kW4A8AutoDequantMinM, 257, 256};
  c.expect_path = W4A8Path::kDequantW8A8;
  run_case(c, rng);
  c = Case{0, kW4A8AutoDequantMinM - 1, 257, 256};
  c.expect_path = W4A8Path::kTokens64;
  run_case(c, rng);
  std::printf("[w4a8] dequantize + w8a8, every backend: worst rel L2 fp32 Y %.3g\n", worst32);
}

// ---- Bad inputs: a Status naming the value, nothing launched ---------------------------------------------------
class W4A8Errors : public ::testing::Test {
 protected:
  void SetUp() override {
    // Validation runs before any device call, so host addresses serve as (never dereferenced) device pointers.
    p = W4A8Params{};
    p.x.m = 4;
    p.x.k = 128;
    p.x.q = reinterpret_cast<const int8_t*>(buf);
    p.x.scale = reinterpret_cast<const float*>(buf);
    p.x.row_sum = reinterpret_cast<const int32_t*>(buf);
    p.w = {40, 128, 128, buf, 1 << 20};
    p.y = buf;
  }
  void expect_error(const char* needle) {
    size_t ws = 0;
    const Status s = w4a8_gemm_workspace_bytes(p, &ws);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message() << " (expected '" << needle << "')";
    const Status s2 = w4a8_gemm(p, nullptr);
    EXPECT_EQ(s2.message(), s.message());
  }
  alignas(16) static inline uint8_t buf[64] = {};
  W4A8Params p;
};

TEST_F(W4A8Errors, Pointers) {
  p.x.q = nullptr;
  expect_error("x.q are null");
  SetUp();
  p.x.q = reinterpret_cast<const int8_t*>(buf + 8);
  expect_error("16-byte aligned");
  SetUp();
  p.x.scale = nullptr;
  expect_error("x.scale are null");
  SetUp();
  p.w.data = nullptr;
  expect_error("w.data is null");
  SetUp();
  p.w.data = buf + 4;
  expect_error("w.data is not 16-byte aligned");
  SetUp();
  p.y = nullptr;
  expect_error("output y is null");
  SetUp();
  p.y = buf + 1;
  expect_error("not 2-byte aligned");
  SetUp();
  p.bias = reinterpret_cast<const float*>(buf + 2);
  expect_error("bias is not 4-byte aligned");
}

TEST_F(W4A8Errors, Shapes) {
  p.x.k = 256;
  expect_error("activation K 256 does not match weight K 128");
  SetUp();
  p.w.group_size = 96;
  expect_error("group size 96");
  SetUp();
  p.w.k = p.x.k = 96;
  expect_error("K 96 must be a positive multiple of 64");
  SetUp();
  p.w.k = p.x.k = 262144;
  expect_error("K 262144 exceeds 131072");
  SetUp();
  p.w.bytes = 1000;
  expect_error("weight bytes 1000 are fewer than");
  SetUp();
  p.x.ldq = 136;
  expect_error("ldq 136");
  SetUp();
  p.ldy = 39;
  expect_error("ldy 39 is smaller than N 40");
  SetUp();
  p.x.m = 0;
  expect_error("M 0");
  SetUp();
  p.w.n = 0;
  expect_error("N 0");
  SetUp();
  p.y_dtype = static_cast<GemmDType>(7);
  expect_error("y dtype 7");
  SetUp();
  p.w.group_size = 0;
  p.x.row_sum = nullptr;
  expect_error("row sums x.row_sum are null");
  SetUp();
  p.path = static_cast<W4A8Path>(10);
  expect_error("path 10 is unknown");
  SetUp();
  p.w8a8_backend = static_cast<W8A8Backend>(9);
  expect_error("w8a8_backend 9 is unknown");
}

// A real qoq-g128 problem, [m, 512] x [64, 512]^T, on the device with its output poisoned (for the workspace errors:
// nothing may run).
struct PoisonedProblem {
  DeviceBuffer w, x, s, y;
  W4A8Params p;
};
void make_poisoned(std::mt19937_64& rng, int m, PoisonedProblem* out) {
  const int n = 64, k = 512;
  std::vector<float> wf = make_weights(rng, n, k);
  QoQGroupWeights w;
  ASSERT_TRUE(qoq_quantize_weights(wf.data(), n, k, 128, &w).ok());
  W4A8Packed packed;
  ASSERT_TRUE(w4a8_prepack(w, &packed).ok());
  ASSERT_EQ(out->w.allocate(packed.data.size()), cudaSuccess);
  ASSERT_EQ(out->x.allocate(size_t(m) * k), cudaSuccess);
  ASSERT_EQ(out->s.allocate(4 * size_t(m)), cudaSuccess);
  ASSERT_EQ(out->y.allocate(size_t(m) * n * 2), cudaSuccess);
  QDEC_CUDA_CHECK(cudaMemcpy(out->w.get(), packed.data.data(), packed.data.size(), cudaMemcpyHostToDevice));
  QDEC_CUDA_CHECK(cudaMemset(out->x.get(), 1, out->x.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(out->s.get(), 0, out->s.bytes()));
  QDEC_CUDA_CHECK(cudaMemset(out->y.get(), 0xFF, out->y.bytes()));
  out->p.x = {m, k, out->x.as<int8_t>(), 0, out->s.as<float>(), nullptr};
  out->p.w = {n, k, 128, out->w.get(), packed.data.size()};
  out->p.y = out->y.get();
}
void expect_still_poisoned(const PoisonedProblem& pr) {
  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> y(pr.y.bytes() / 2);
  QDEC_CUDA_CHECK(cudaMemcpy(y.data(), pr.y.get(), pr.y.bytes(), cudaMemcpyDeviceToHost));
  for (uint16_t v : y) ASSERT_EQ(v, 0xFFFF) << "a kernel ran despite the error";
}

// The dequantize path's workspace: 256-byte alignment (w8a8_gemm's), its full size.
TEST_F(W4A8Errors, DequantWorkspace) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  PoisonedProblem pr;
  ASSERT_NO_FATAL_FAILURE(make_poisoned(rng, 20, &pr));
  W4A8Params& q = pr.p;
  q.path = W4A8Path::kDequantW8A8;
  size_t ws = 0;
  QDEC_ASSERT_OK(w4a8_gemm_workspace_bytes(q, &ws));
  ASSERT_GE(ws, kWorkspaceStateBytes + size_t(q.w.n) * q.w.k);
  DeviceBuffer d_ws(ws + 256);
  q.workspace = d_ws.get();
  q.workspace_bytes = ws - 1;
  Status s = w4a8_gemm(q, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace bytes " + std::to_string(ws - 1)), std::string::npos) << s.message();
  q.workspace = static_cast<uint8_t*>(d_ws.get()) + 16;
  q.workspace_bytes = ws;
  s = w4a8_gemm(q, nullptr);
  EXPECT_NE(s.message().find("workspace is not 256-byte aligned"), std::string::npos) << s.message();
  expect_still_poisoned(pr);
}

// A forced split needs a workspace: too small or null is refused.
TEST_F(W4A8Errors, WorkspaceTooSmall) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  PoisonedProblem pr;
  ASSERT_NO_FATAL_FAILURE(make_poisoned(rng, 2, &pr));
  W4A8Params& q = pr.p;
  q.num_splits = 4;
  size_t ws = 0;
  QDEC_ASSERT_OK(w4a8_gemm_workspace_bytes(q, &ws));
  ASSERT_GT(ws, 0u);
  DeviceBuffer d_ws(ws);
  q.workspace = d_ws.get();
  q.workspace_bytes = ws - 16;
  Status s = w4a8_gemm(q, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace bytes " + std::to_string(ws - 16)), std::string::npos) << s.message();
  q.workspace = nullptr;
  s = w4a8_gemm(q, nullptr);
  EXPECT_NE(s.message().find("workspace is null"), std::string::npos) << s.message();
  expect_still_poisoned(pr);
}

}  // namespace
}  // namespace qdec
