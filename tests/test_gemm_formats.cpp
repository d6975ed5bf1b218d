// Weight formats on the CPU: the packed byte layout on hand-written positions, quantizer round trips
// (hand-written and random), K not a multiple of the group, GGUF Q4_0 / Q4_1 / Q8_0 import bit-exact against the
// GGUF reader's dequantization, and the documented errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "qdec/formats.h"
#include "qdec/gemm.h"
#include "qdec/gguf.h"
#include "qdec/weight_formats.h"
#include "test_util.h"

namespace {

using namespace qdec;

WeightFormat fmt_of(const char* name) {
  WeightFormat f;
  EXPECT_TRUE(parse_weight_format(name, &f).ok()) << name;
  return f;
}

TEST(WeightFormats, NamesRoundTrip) {
  for (const char* n :
       {"int4-g32", "int4-g64", "int4-g128", "int4", "int4zp-g32", "int4zp", "int8", "int8-g32", "int8-g128"}) {
    EXPECT_EQ(fmt_of(n).name(), n);
  }
  WeightFormat f;
  EXPECT_FALSE(parse_weight_format("int4-g48", &f).ok());
  EXPECT_FALSE(parse_weight_format("int3", &f).ok());
  f.group_size = 16;
  const Status s = validate_weight_format(f);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("16"), std::string::npos) << s.message();
}

// Every (row, col) of a padded layout has its own code position.
TEST(WeightFormats, LayoutIsABijection) {
  for (const char* name : {"int4-g32", "int8-g32"}) {
    const WeightLayout L{fmt_of(name), 32, 160};
    std::set<std::pair<size_t, int>> seen;
    for (int r = 0; r < L.n_pad(); ++r) {
      for (int c = 0; c < L.k_pad(); ++c) {
        int nib = 0;
        const size_t off = L.code_offset(r, c, &nib);
        ASSERT_LT(off, L.code_bytes());
        ASSERT_TRUE(seen.insert({off, nib}).second) << name << " row " << r << " col " << c;
      }
    }
    EXPECT_EQ(seen.size(), size_t(L.n_pad()) * L.k_pad());
  }
}

// Hand-written positions of docs/formats.md ("Weight formats").
TEST(WeightFormats, PackedPositionsHandWritten) {
  const WeightLayout L4{fmt_of("int4-g32"), 16, 128};
  struct P {
    int row, col;
    size_t off;
    int nib;
  };
  for (const P& p : {P{0, 0, 0, 0}, P{8, 0, 0, 1}, P{0, 8, 1, 0}, P{8, 8, 1, 1}, P{0, 1, 2, 0}, P{8, 1, 2, 1},
                     P{0, 9, 3, 0}, P{8, 9, 3, 1}, P{0, 16, 4, 0}, P{0, 2, 16, 0}, P{1, 0, 64, 0}, P{0, 64, 512, 0},
                     P{15, 63, 7 * 64 + 3 * 16 + 12 + 3, 1}}) {
    int nib = -1;
    EXPECT_EQ(L4.code_offset(p.row, p.col, &nib), p.off) << p.row << "," << p.col;
    EXPECT_EQ(nib, p.nib) << p.row << "," << p.col;
  }
  const WeightLayout L8{fmt_of("int8"), 16, 64};
  for (const P& p : {P{0, 0, 0, 0}, P{0, 1, 1, 0}, P{8, 0, 2, 0}, P{8, 1, 3, 0}, P{0, 8, 4, 0}, P{8, 9, 7, 0},
                     P{0, 16, 8, 0}, P{0, 2, 16, 0}, P{1, 0, 64, 0}, P{0, 32, 512, 0}}) {
    int nib = -1;
    EXPECT_EQ(L8.code_offset(p.row, p.col, &nib), p.off) << p.row << "," << p.col;
  }
  // Codes land where the layout says, int8 as q + 128.
  std::vector<int8_t> codes(16 * 64, 0);
  codes[0] = -5;
  codes[9] = 100;  // row 0 col 9 -> byte 5
  std::vector<uint16_t> scales(16 * 2, 0x3C00), second(16 * 2, 0);
  PackedWeights pw;
  ASSERT_TRUE(pack_weights(L8, codes.data(), scales.data(), second.data(), &pw).ok());
  EXPECT_EQ(pw.codes[0], 123);
  EXPECT_EQ(pw.codes[5], 228);  // (0, 9): s 0, reg 2, e 1 -> byte 5
  EXPECT_EQ(pw.codes[1], 128);
}

TEST(WeightFormats, QuantizeHandWrittenGroupsExactly) {
  // int4: a group 1, 1.5, ..., 8.5 -> s 0.5, o 1, codes 0..15, exact.
  std::vector<float> w(64);
  for (int i = 0; i < 32; ++i) w[i] = 1.0f + 0.5f * (i % 16);
  for (int i = 32; i < 64; ++i) w[i] = -2.0f + 0.25f * (i % 16);
  PackedWeights pw;
  ASSERT_TRUE(quantize_weights(w.data(), 1, 64, fmt_of("int4-g32"), &pw).ok());
  std::vector<double> d(64);
  dequantize_weights_f64(pw, d.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(d[i], w[i]) << i;
    EXPECT_EQ(packed_code(pw, 0, i), i % 16) << i;
  }
  EXPECT_EQ(pw.meta[0] | (pw.meta[1] << 8), 0x3800);  // scale 0.5 of group 0 row 0
  EXPECT_EQ(pw.meta[2] | (pw.meta[3] << 8), 0x3C00);  // offset 1.0
  // int4 zero point: (q - 3) * 0.5 for q = 0..15 -> s 0.5, z 3.
  for (int i = 0; i < 32; ++i) w[i] = 0.5f * ((i % 16) - 3);
  ASSERT_TRUE(quantize_weights(w.data(), 1, 32, fmt_of("int4zp-g32"), &pw).ok());
  dequantize_weights_f64(pw, d.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(d[i], w[i]) << i;
  EXPECT_EQ(pw.meta[2] | (pw.meta[3] << 8), 0x4200);  // z = 3.0
  // int8: q * 0.25 for q = -127..127 (amax 31.75 -> s 0.25).
  std::vector<float> w8(255);
  for (int i = 0; i < 255; ++i) w8[i] = 0.25f * (i - 127);
  ASSERT_TRUE(quantize_weights(w8.data(), 1, 255, fmt_of("int8"), &pw).ok());
  std::vector<double> d8(255);
  dequantize_weights_f64(pw, d8.data());
  for (int i = 0; i < 255; ++i) EXPECT_EQ(d8[i], w8[i]) << i;
}

// Random weights, every format, K not a multiple of the group: each value within half a step of its group.
TEST(WeightFormats, RandomRoundTripWithinHalfStep) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const char* name :
       {"int4-g32", "int4-g64", "int4-g128", "int4", "int4zp-g32", "int4zp-g128", "int8", "int8-g32", "int8-g128"}) {
    const int n = 37, k = 1000;  // 1000 = 31 * 32 + 8 = 7 * 128 + 104
    std::vector<float> w(size_t(n) * k);
    for (auto& v : w) v = nd(rng);
    PackedWeights pw;
    ASSERT_TRUE(quantize_weights(w.data(), n, k, fmt_of(name), &pw).ok()) << name;
    std::vector<double> d(w.size());
    dequantize_weights_f64(pw, d.data());
    const WeightLayout& L = pw.layout;
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < k; ++c) {
        const int grp = c / L.group_k();
        const size_t mi = (size_t(grp) * L.n_pad() + r) * weight_meta_entry_bytes(L.format.kind);
        const double s = fp16_bits_to_float(uint16_t(pw.meta[mi] | (pw.meta[mi + 1] << 8)));
        const double err = std::fabs(d[size_t(r) * k + c] - w[size_t(r) * k + c]);
        // Half a step, plus the fp16 rounding of the offset (int4) and the clamp of a rounded range.
        ASSERT_LE(err, 0.5 * s * 1.01 + 4e-3) << name << " row " << r << " col " << c;
      }
    }
    // Padding rows and columns hold code 0.
    EXPECT_EQ(L.num_groups(), L.format.group_size == 0 ? 1 : (k + L.format.group_size - 1) / L.format.group_size);
  }
}

TEST(WeightFormats, Bf16InputMatchesFloatInput) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n = 20, k = 96;
  std::vector<uint16_t> bits(size_t(n) * k);
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = float_to_bf16_bits(nd(rng));
    f[i] = bf16_bits_to_float(bits[i]);
  }
  for (const char* name : {"int4-g32", "int8"}) {
    PackedWeights a, b;
    ASSERT_TRUE(quantize_weights_bf16(bits.data(), n, k, fmt_of(name), &a).ok());
    ASSERT_TRUE(quantize_weights(f.data(), n, k, fmt_of(name), &b).ok());
    EXPECT_EQ(a.codes, b.codes) << name;
    EXPECT_EQ(a.meta, b.meta) << name;
  }
}

TEST(WeightFormats, SpecialValues) {
  std::vector<float> w(32, 0.0f);
  PackedWeights pw;
  ASSERT_TRUE(quantize_weights(w.data(), 1, 32, fmt_of("int4-g32"), &pw).ok());
  std::vector<double> d(32);
  dequantize_weights_f64(pw, d.data());
  for (double v : d) EXPECT_EQ(v, 0.0);
  w[3] = NAN;
  w[4] = INFINITY;
  w[5] = -INFINITY;
  w[6] = 1.0f;
  ASSERT_TRUE(quantize_weights(w.data(), 1, 32, fmt_of("int8"), &pw).ok());
  EXPECT_EQ(packed_code(pw, 0, 3), 0);
  EXPECT_EQ(packed_code(pw, 0, 4), 127);
  EXPECT_EQ(packed_code(pw, 0, 5), -127);
  EXPECT_EQ(packed_code(pw, 0, 6), 127);
}

// ---- GGUF import ------------------------------------------------------------------------------------------

void put_half(std::vector<uint8_t>* b, float v) {
  const uint16_t h = float_to_fp16_bits(v);
  b->push_back(uint8_t(h & 0xFF));
  b->push_back(uint8_t(h >> 8));
}

// Dequantize both ways and compare bit for bit.
void expect_import_exact(GgmlType type, const std::vector<uint8_t>& data, int n, int k) {
  PackedWeights pw;
  const Status s = import_gguf_weights(type, data.data(), data.size(), n, k, &pw);
  ASSERT_TRUE(s.ok()) << s.to_string();
  std::vector<float> ref(size_t(n) * k);
  ASSERT_TRUE(ggml_dequantize(type, data.data(), data.size(), uint64_t(n) * k, ref.data()).ok());
  std::vector<double> d(ref.size());
  dequantize_weights_f64(pw, d.data());
  for (size_t i = 0; i < ref.size(); ++i) {
    const float ours = static_cast<float>(d[i]);
    uint32_t a, b;
    std::memcpy(&a, &ours, 4);
    std::memcpy(&b, &ref[i], 4);
    ASSERT_EQ(a, b) << ggml_type_name(type) << " element " << i << ": " << ours << " vs " << ref[i];
  }
}

TEST(WeightFormats, GgufImportHandWrittenBlocks) {
  // Q4_0: d = 0.5, byte j = (j low, 15 - j high): values (j - 8) * 0.5 and (7 - j) * 0.5.
  std::vector<uint8_t> q40;
  put_half(&q40, 0.5f);
  for (int j = 0; j < 16; ++j) q40.push_back(uint8_t(j | ((15 - j) << 4)));
  expect_import_exact(GgmlType::kQ4_0, q40, 1, 32);
  PackedWeights pw;
  ASSERT_TRUE(import_gguf_weights(GgmlType::kQ4_0, q40.data(), q40.size(), 1, 32, &pw).ok());
  EXPECT_EQ(pw.layout.format.name(), "int4zp-g32");
  std::vector<double> d(32);
  dequantize_weights_f64(pw, d.data());
  EXPECT_EQ(d[0], -4.0);
  EXPECT_EQ(d[15], 3.5);
  EXPECT_EQ(d[16], 3.5);
  EXPECT_EQ(d[31], -4.0);
  // Q4_1: d = 0.25, m = -1: values q * 0.25 - 1.
  std::vector<uint8_t> q41;
  put_half(&q41, 0.25f);
  put_half(&q41, -1.0f);
  for (int j = 0; j < 16; ++j) q41.push_back(uint8_t((j * 7) % 16 | (j << 4)));
  expect_import_exact(GgmlType::kQ4_1, q41, 1, 32);
  ASSERT_TRUE(import_gguf_weights(GgmlType::kQ4_1, q41.data(), q41.size(), 1, 32, &pw).ok());
  dequantize_weights_f64(pw, d.data());
  EXPECT_EQ(d[16], -1.0);
  EXPECT_EQ(d[31], 15 * 0.25 - 1.0);
  // Q8_0: d = 0.125, q = -128..., 127.
  std::vector<uint8_t> q80;
  put_half(&q80, 0.125f);
  for (int j = 0; j < 32; ++j) q80.push_back(uint8_t(int8_t(j == 0 ? -128 : j == 1 ? 127 : j - 16)));
  expect_import_exact(GgmlType::kQ8_0, q80, 1, 32);
  ASSERT_TRUE(import_gguf_weights(GgmlType::kQ8_0, q80.data(), q80.size(), 1, 32, &pw).ok());
  dequantize_weights_f64(pw, d.data());
  EXPECT_EQ(d[0], -16.0);
  EXPECT_EQ(d[1], 127 * 0.125);
}

TEST(WeightFormats, GgufImportRandomBlocks) {
  QDEC_TEST_RNG(rng);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  const int n = 19, k = 96;
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    std::vector<uint8_t> data;
    for (int b = 0; b < n * k / 32; ++b) {
      put_half(&data, u(rng) * 0.05f);
      if (type == GgmlType::kQ4_1) put_half(&data, u(rng));
      const int q_bytes = type == GgmlType::kQ8_0 ? 32 : 16;
      for (int j = 0; j < q_bytes; ++j) data.push_back(uint8_t(byte(rng)));
    }
    expect_import_exact(type, data, n, k);
  }
}

// Every Q4_0 / Q4_1 / Q8_0 weight matrix of the SmolLM2 GGUF (scripts/fetch_model.sh; skipped without it):
// the imported weights dequantize bit for bit to what the GGUF reader gives.
TEST(WeightFormats, GgufImportRealModelBitExact) {
  const std::string path = qdec_find_model();
  if (path.empty()) GTEST_SKIP() << "no GGUF model (scripts/fetch_model.sh or QDEC_MODEL)";
  GgufFile file;
  const Status open = GgufFile::open(path, &file);
  ASSERT_TRUE(open.ok()) << open.to_string();
  int imported = 0;
  for (const GgufTensorInfo& info : file.tensors()) {
    if (info.dims.size() != 2) continue;
    if (info.type != GgmlType::kQ4_0 && info.type != GgmlType::kQ4_1 && info.type != GgmlType::kQ8_0) continue;
    PackedWeights pw;
    const Status s = import_gguf_tensor(file, info, &pw);
    ASSERT_TRUE(s.ok()) << info.name << ": " << s.to_string();
    std::vector<float> ref(info.num_elements);
    ASSERT_TRUE(file.dequantize(info, ref.data()).ok()) << info.name;
    std::vector<double> d(ref.size());
    dequantize_weights_f64(pw, d.data());
    for (size_t i = 0; i < ref.size(); ++i) {
      const float ours = static_cast<float>(d[i]);
      ASSERT_EQ(std::memcmp(&ours, &ref[i], 4), 0) << info.name << " element " << i << ": " << ours << " vs " << ref[i];
    }
    ++imported;
  }
  EXPECT_GT(imported, 0) << "no Q4_0/Q4_1/Q8_0 matrix in " << path;
  RecordProperty("imported_tensors", imported);
}

TEST(WeightFormats, GgufImportErrors) {
  std::vector<uint8_t> data(18 * 2, 0);
  PackedWeights pw;
  Status s = import_gguf_weights(GgmlType::kQ4_0, data.data(), data.size(), 1, 48, &pw);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("48"), std::string::npos) << s.message();
  s = import_gguf_weights(GgmlType::kQ4_0, data.data(), data.size() - 1, 2, 32, &pw);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("35"), std::string::npos) << s.message();
  s = import_gguf_weights(GgmlType::kQ6_K, data.data(), data.size(), 1, 256, &pw);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
}

TEST(WeightFormats, QuantizeErrors) {
  std::vector<float> w(64, 1.0f);
  PackedWeights pw;
  EXPECT_EQ(quantize_weights(w.data(), 0, 64, fmt_of("int4-g32"), &pw).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_weights(nullptr, 1, 64, fmt_of("int4-g32"), &pw).code(), StatusCode::kInvalidArgument);
  std::vector<int8_t> codes(64, 16);
  std::vector<uint16_t> sc(2, 0), se(2, 0);
  const Status s = pack_weights(WeightLayout{fmt_of("int4-g32"), 1, 64}, codes.data(), sc.data(), se.data(), &pw);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("16"), std::string::npos);
  // Conv weights: groups run along Ci and must divide it.
  std::vector<float> cw(8 * 48 * 9, 0.5f);
  const Status c = quantize_conv_weights(cw.data(), 8, 48, 3, 3, fmt_of("int4-g32"), &pw);
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.message().find("48"), std::string::npos) << c.message();
}

// The conv reorder puts (ky, kx, ci) in K order: check one weight through the packed form.
TEST(WeightFormats, ConvWeightReorder) {
  const int co = 3, ci = 32, kh = 2, kw = 3;
  std::vector<float> w(size_t(co) * ci * kh * kw);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 37) % 64) * 0.125f;
  PackedWeights pw;
  ASSERT_TRUE(quantize_conv_weights(w.data(), co, ci, kh, kw, fmt_of("int8"), &pw).ok());
  std::vector<double> d(w.size());
  dequantize_weights_f64(pw, d.data());
  const int k = kh * kw * ci;
  for (int o = 0; o < co; ++o)
    for (int c = 0; c < ci; ++c)
      for (int y = 0; y < kh; ++y)
        for (int x = 0; x < kw; ++x) {
          const double orig = w[((size_t(o) * ci + c) * kh + y) * kw + x];
          const double got = d[size_t(o) * k + (y * kw + x) * ci + c];
          ASSERT_NEAR(got, orig, 0.07) << o << " " << c << " " << y << " " << x;
        }
}

// kAuto's wgmma rule (qdec/gemm.h), a pure function of the shape and the SM count: its bounds as measured on the H200
// (docs/gemm.md, "Session 43" under "The wgmma path": shapes of 4-112 Mi weights at M = 8-1024).
TEST(GemmAutoRule, WgmmaBounds) {
  // From M 24 (over the fused kernel up to M 32) with 4 Mi weights.
  EXPECT_FALSE(wgmma_auto_wins(23, 8192, 8192));
  EXPECT_TRUE(wgmma_auto_wins(24, 2048, 2048));
  EXPECT_FALSE(wgmma_auto_wins(24, 2048, 1024));  // 2 Mi: not measured
  EXPECT_TRUE(wgmma_auto_wins(64, 4096, 1024));
  // M 65-128 from 8 Mi, or from 4 Mi with K >= 3072 (session 44); M 129-192 from 10 Mi.
  EXPECT_FALSE(wgmma_auto_wins(65, 2048, 2048));
  EXPECT_FALSE(wgmma_auto_wins(128, 4096, 1536));  // 6 Mi, K 1536
  EXPECT_TRUE(wgmma_auto_wins(65, 1024, 4096));    // 4 Mi, K 4096
  EXPECT_TRUE(wgmma_auto_wins(128, 2048, 3072));   // 6 Mi, K 3072
  EXPECT_FALSE(wgmma_auto_wins(128, 1024, 3071));  // K 3071
  EXPECT_FALSE(wgmma_auto_wins(128, 1023, 4096));  // just under 4 Mi
  EXPECT_FALSE(wgmma_auto_wins(129, 1280, 4096));  // 5 Mi at M 129
  EXPECT_TRUE(wgmma_auto_wins(128, 2048, 4096));
  EXPECT_FALSE(wgmma_auto_wins(129, 2048, 4096));
  EXPECT_TRUE(wgmma_auto_wins(192, 1280, 8192));
  EXPECT_FALSE(wgmma_auto_wins(193, 1280, 8192, 132));  // 10 Mi: the one-wave clause starts at 16 Mi
  // Up to M 1024 from 28 Mi, whatever the waves.
  EXPECT_TRUE(wgmma_auto_wins(1024, 8192, 3584));
  EXPECT_FALSE(wgmma_auto_wins(1025, 28672, 4096, 132));
  // M 193-1024 from 16 Mi with K >= 4096 where the 256-token tiles fit one wave of the SMs (132 on the H200).
  EXPECT_TRUE(wgmma_auto_wins(1024, 4096, 4096, 132));   // 128 tiles
  EXPECT_TRUE(wgmma_auto_wins(512, 6144, 4096, 132));    // 96 tiles
  EXPECT_TRUE(wgmma_auto_wins(768, 5120, 5120, 132));    // 120 tiles
  EXPECT_FALSE(wgmma_auto_wins(768, 6144, 4096, 132));   // 144 tiles: two waves
  EXPECT_FALSE(wgmma_auto_wins(1024, 5120, 4096, 132));  // 160 tiles
  EXPECT_FALSE(wgmma_auto_wins(256, 3072, 4096, 132));   // 12 Mi
  EXPECT_FALSE(wgmma_auto_wins(1024, 8192, 2048, 132));  // K 2048 (not measured)
  EXPECT_FALSE(wgmma_auto_wins(1024, 4096, 4096, 0));    // no SM count: the weight bounds alone
  EXPECT_TRUE(wgmma_auto_wins(192, 4096, 4096, 0));
}

// The wgmma path's automatic token tile (qdec/gemm.h): 64 / 128 / 256 by M, and 64 at M = 96-128 up to 12 Mi weights
// and at M = 105-128 up to 16 Mi (docs/gemm.md, "Session 44").
TEST(GemmAutoRule, WgmmaTokenTile) {
  EXPECT_EQ(wgmma_auto_tile_m(1, 28672, 4096), 64);
  EXPECT_EQ(wgmma_auto_tile_m(64, 28672, 4096), 64);
  EXPECT_EQ(wgmma_auto_tile_m(65, 1280, 8192), 128);
  EXPECT_EQ(wgmma_auto_tile_m(95, 1280, 8192), 128);
  EXPECT_EQ(wgmma_auto_tile_m(96, 1280, 8192), 64);
  EXPECT_EQ(wgmma_auto_tile_m(96, 3072, 4096), 64);    // 12 Mi
  EXPECT_EQ(wgmma_auto_tile_m(104, 3073, 4096), 128);  // just over 12 Mi
  EXPECT_EQ(wgmma_auto_tile_m(104, 4096, 4096), 128);  // 16 Mi
  EXPECT_EQ(wgmma_auto_tile_m(105, 4096, 4096), 64);
  EXPECT_EQ(wgmma_auto_tile_m(128, 2048, 8192), 64);   // 16 Mi
  EXPECT_EQ(wgmma_auto_tile_m(128, 4097, 4096), 128);  // just over 16 Mi
  EXPECT_EQ(wgmma_auto_tile_m(128, 5120, 4096), 128);
  EXPECT_EQ(wgmma_auto_tile_m(129, 1280, 8192), 256);
  EXPECT_EQ(wgmma_auto_tile_m(4096, 1280, 8192), 256);
}

}  // namespace
