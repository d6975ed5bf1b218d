// The W4A8 prepack (docs/formats.md, "W4A8 kernel layout") on the CPU: hand-written byte positions, and an
// unpacker written here from the document (not from src/int8gemm/w4a8_layout.h) that must give back every code,
// group scale, zero and channel scale of random weights; prepack errors; the in-register uint4 -> int8 step
// (w4a8_layout.h's dequant4, shared by the GEMM kernel and the dequantize path) on every valid (q, z, s1).
#include <cuda_runtime.h>  // __host__ __device__ of the layout header
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "int8gemm/w4a8_layout.h"
#include "qdec/w4a8_gemm.h"
#include "test_util.h"

namespace qdec {
namespace {

size_t align16(size_t v) {
  return (v + 15) / 16 * 16;
}

// Region offsets from the document: codes, then meta (qoq-g), then scales, then zeros (qoq-c), each 16-aligned.
struct DocLayout {
  int n, k, gs;
  int nb() const { return (n + 15) / 16; }
  int kt() const { return k / 64; }
  size_t meta() const { return size_t(nb()) * kt() * 512; }
  size_t scales() const { return align16(meta() + (gs ? size_t(nb()) * (k / gs) * 32 : 0)); }
  size_t zeros() const { return align16(scales() + size_t(nb()) * 16 * 2); }
  size_t total() const { return align16(zeros() + (gs ? 0 : size_t(nb()) * 16)); }
};

// Every code of the packed buffer in the document's forward order: tile (nb, kt), lane, word, byte, nibble.
std::vector<int> unpack_codes(const std::vector<uint8_t>& d, int n, int k) {
  const DocLayout L{n, k, 0};
  std::vector<int> codes(size_t(L.nb()) * 16 * k, -1);
  for (int nb = 0; nb < L.nb(); ++nb)
    for (int kt = 0; kt < L.kt(); ++kt)
      for (int lane = 0; lane < 32; ++lane)
        for (int word = 0; word < 4; ++word)
          for (int byte = 0; byte < 4; ++byte)
            for (int nib = 0; nib < 2; ++nib) {
              const int row = nb * 16 + lane / 4 + 8 * (word % 2);
              const int col = kt * 64 + (word / 2) * 32 + nib * 16 + (lane % 4) * 4 + byte;
              const uint8_t b = d[((size_t(nb) * L.kt() + kt) * 32 + lane) * 16 + word * 4 + byte];
              codes[size_t(row) * k + col] = nib ? b >> 4 : b & 15;
            }
  return codes;
}

QoQGroupWeights random_group_weights(std::mt19937_64& rng, int n, int k, int gs) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(size_t(n) * k);
  for (auto& v : w) v = nd(rng);
  QoQGroupWeights q;
  EXPECT_TRUE(qoq_quantize_weights(w.data(), n, k, gs, &q).ok());
  return q;
}

TEST(W4A8Prepack, HandWrittenPositions) {
  // n = 17 (two channel blocks), k = 128 (two tiles), group 64. Every code is 0 except a few marked entries,
  // whose byte positions are written out by hand.
  QoQGroupWeights w;
  w.n = 17;
  w.k = 128;
  w.group_size = 64;
  w.codes.assign(17 * 64, 0);
  w.group_scales.assign(17 * 2, 1);
  w.group_zeros.assign(17 * 1, 0);
  w.channel_scales.assign(17, 0x3C00);
  auto put = [&](int r, int c, int v) {
    uint8_t& b = w.codes[(size_t(r) * 128 + c) / 2];
    b = (c % 2) ? uint8_t((b & 0x0F) | (v << 4)) : uint8_t((b & 0xF0) | v);
  };
  put(0, 0, 0x1);    // tile 0, lane 0, word 0, byte 0, low nibble
  put(0, 16, 0x2);   // same byte, high nibble (K 16..31 of a k-step are the high nibbles)
  put(0, 32, 0x3);   // k-step 1 of lane 0: word 2 -> byte 8
  put(0, 4, 0x4);    // lane t = 1 (K 4..7) -> byte 16
  put(8, 0, 0x5);    // row g + 8: word 1 -> byte 4
  put(1, 0, 0x6);    // g = 1: lane 4 -> byte 64
  put(0, 64, 0x7);   // second K tile -> byte 512
  put(16, 0, 0x8);   // second channel block: tile (1, 0) = 2 tiles in -> byte 1024
  put(15, 63, 0x9);  // g 7, h 1, s 1, high, t 3, i 3: lane 31, word 3, byte 3 high -> 496 + 12 + 3 = 511, high
  // Group meta of (row 9, group 1): s1 3, z 2 -> (3, 6) at meta + (0 * 2 + 1) * 32 + 1 * 4 + 2.
  w.group_scales[9 * 2 + 1] = 3;
  w.group_zeros[9] = 0x20;
  W4A8Packed p;
  ASSERT_TRUE(w4a8_prepack(w, &p).ok());
  const DocLayout L{17, 128, 64};
  ASSERT_EQ(p.data.size(), L.total());
  EXPECT_EQ(L.meta(), 2048u);    // 2 blocks x 2 tiles x 512
  EXPECT_EQ(L.scales(), 2176u);  // + 2 blocks x 2 groups x 32
  EXPECT_EQ(p.data[0], 0x21);
  EXPECT_EQ(p.data[8], 0x03);
  EXPECT_EQ(p.data[16], 0x04);
  EXPECT_EQ(p.data[4], 0x05);
  EXPECT_EQ(p.data[64], 0x06);
  EXPECT_EQ(p.data[512], 0x07);
  EXPECT_EQ(p.data[1024], 0x08);
  EXPECT_EQ(p.data[511], 0x90);
  EXPECT_EQ(p.data[2048 + 32 + 4 + 2], 3);
  EXPECT_EQ(p.data[2048 + 32 + 4 + 3], 6);
  EXPECT_EQ(p.data[2048 + 0], 1);  // (row 0, group 0): s1 1, z * s1 0
  EXPECT_EQ(p.data[2048 + 1], 0);
  // Channel scale of row 16 (fp16 1.0) at scales + 32; padded rows 17..31 stay 0.
  EXPECT_EQ(p.data[2176 + 32], 0x00);
  EXPECT_EQ(p.data[2176 + 33], 0x3C);
  EXPECT_EQ(p.data[2176 + 34], 0x00);
  // Every other code byte is zero.
  size_t nonzero = 0;
  for (size_t i = 0; i < L.meta(); ++i) nonzero += p.data[i] != 0;
  EXPECT_EQ(nonzero, 8u);
}

TEST(W4A8Prepack, GroupRoundTripAllFields) {
  QDEC_TEST_RNG(rng);
  for (int gs : {32, 64, 128}) {
    for (auto [n, k] : {std::pair{1, 128}, {17, 384}, {33, 256}, {50, 1024}}) {
      SCOPED_TRACE(::testing::Message() << "group " << gs << " n " << n << " k " << k);
      const QoQGroupWeights w = random_group_weights(rng, n, k, gs);
      W4A8Packed p;
      ASSERT_TRUE(w4a8_prepack(w, &p).ok());
      const DocLayout L{n, k, gs};
      ASSERT_EQ(p.data.size(), L.total());
      EXPECT_EQ(p.n, n);
      EXPECT_EQ(p.k, k);
      EXPECT_EQ(p.group_size, gs);
      const std::vector<int> codes = unpack_codes(p.data, n, k);
      for (int r = 0; r < L.nb() * 16; ++r)
        for (int c = 0; c < k; ++c)
          ASSERT_EQ(codes[size_t(r) * k + c], r < n ? w.code(r, c) : 0) << "code (" << r << ", " << c << ")";
      const int ng = k / gs;
      for (int r = 0; r < L.nb() * 16; ++r)
        for (int gi = 0; gi < ng; ++gi) {
          const size_t at = L.meta() + (size_t(r / 16) * ng + gi) * 32 + (r % 8) * 4 + (r % 16) / 8 * 2;
          const int s1 = p.data[at], zs = p.data[at + 1];
          if (r >= n) {
            EXPECT_EQ(s1, 0);
            EXPECT_EQ(zs, 0);
            continue;
          }
          ASSERT_EQ(s1, w.scale(r, gi)) << "s1 (" << r << ", " << gi << ")";
          ASSERT_EQ(zs, w.zero(r, gi) * s1) << "z*s1 (" << r << ", " << gi << ")";
          ASSERT_EQ(zs / s1, w.zero(r, gi));
        }
      for (int r = 0; r < L.nb() * 16; ++r) {
        const uint16_t s0 = uint16_t(p.data[L.scales() + 2 * r] | (p.data[L.scales() + 2 * r + 1] << 8));
        ASSERT_EQ(s0, r < n ? w.channel_scales[r] : 0) << "s0 row " << r;
      }
      for (size_t i = L.zeros(); i < L.total(); ++i) ASSERT_EQ(p.data[i], 0) << "byte " << i;
    }
  }
}

TEST(W4A8Prepack, ChannelRoundTripAllFields) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> nd(0.3f, 1.0f);
  for (auto [n, k] : {std::pair{1, 64}, {19, 448}, {40, 2048}}) {
    SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k);
    std::vector<float> wf(size_t(n) * k);
    for (auto& v : wf) v = nd(rng);
    QoQChannelWeights w;
    ASSERT_TRUE(qoq_quantize_channels(wf.data(), n, k, &w).ok());
    W4A8Packed p;
    ASSERT_TRUE(w4a8_prepack(w, &p).ok());
    const DocLayout L{n, k, 0};
    ASSERT_EQ(p.data.size(), L.total());
    EXPECT_EQ(p.group_size, 0);
    EXPECT_EQ(L.scales(), L.meta());  // no meta region
    const std::vector<int> codes = unpack_codes(p.data, n, k);
    for (int r = 0; r < L.nb() * 16; ++r)
      for (int c = 0; c < k; ++c)
        ASSERT_EQ(codes[size_t(r) * k + c], r < n ? w.code(r, c) : 0) << "code (" << r << ", " << c << ")";
    for (int r = 0; r < L.nb() * 16; ++r) {
      const uint16_t s = uint16_t(p.data[L.scales() + 2 * r] | (p.data[L.scales() + 2 * r + 1] << 8));
      ASSERT_EQ(s, r < n ? w.scales[r] : 0) << "scale row " << r;
      ASSERT_EQ(p.data[L.zeros() + r], r < n ? w.zeros[r] : 0) << "zero row " << r;
    }
  }
}

TEST(W4A8Prepack, Errors) {
  QDEC_TEST_RNG(rng);
  W4A8Packed p;
  QoQGroupWeights w = random_group_weights(rng, 4, 128, 32);
  EXPECT_EQ(w4a8_prepack(w, nullptr).code(), StatusCode::kInvalidArgument);

  // K a multiple of the group but not of the 64-wide tile.
  QoQGroupWeights w96 = random_group_weights(rng, 4, 96, 32);
  Status s = w4a8_prepack(w96, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("K 96"), std::string::npos) << s.message();

  QoQGroupWeights bad = w;
  bad.group_size = 48;
  s = w4a8_prepack(bad, &p);
  EXPECT_NE(s.message().find("group size 48"), std::string::npos) << s.message();

  bad = w;
  bad.codes.pop_back();
  s = w4a8_prepack(bad, &p);
  EXPECT_NE(s.message().find("inconsistent sizes"), std::string::npos) << s.message();

  // QServe's overflow example (int8 group [-113, 120]): code 15, zero 7, s1 16 -> 128, not an int8.
  std::vector<int8_t> q8(128, 0);
  q8[0] = -113;
  q8[5] = 120;
  const uint16_t s0 = 0x3C00;
  QoQGroupWeights over;
  ASSERT_TRUE(qoq_quantize_int8_groups(q8.data(), &s0, 1, 128, 128, &over).ok());
  s = w4a8_prepack(over, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("weight (0, 5) dequantizes to 128"), std::string::npos) << s.message();

  // A hand-made group scale above 17 would carry out of its byte in the kernel.
  bad = w;
  for (int c = 0; c < 128; ++c) bad.codes[c / 2] = 0;  // codes 0, zero 0: every value fits, only s1 is wrong
  bad.group_zeros[0] = 0;
  bad.group_scales[0] = 18;
  s = w4a8_prepack(bad, &p);
  EXPECT_NE(s.message().find("group scale 18"), std::string::npos) << s.message();

  QoQChannelWeights c;
  c.n = 2;
  c.k = 64;
  c.codes.assign(64, 0);
  c.scales.assign(2, 0);
  c.zeros.assign(1, 0);
  s = w4a8_prepack(c, &p);
  EXPECT_NE(s.message().find("inconsistent sizes"), std::string::npos) << s.message();
}

// Four codes per word, every zero and group scale the prepack accepts (s1 <= 17, (q - z) * s1 in int8 for all four
// codes), s1 = 1 for the per-channel scheme: each byte of dequant4 is (q - z) * s1 in two's complement, whatever
// the other three codes are (no carry or borrow crosses a byte, also where the bias word borrowed: z * s1 > 128).
TEST(W4A8Prepack, InRegisterDequantExact) {
  long long words = 0;
  for (uint32_t s1 = 1; s1 <= uint32_t(w4a8::kMaxGroupScale); ++s1)
    for (int z = 0; z < 16; ++z) {
      std::vector<int> valid;
      for (int q = 0; q < 16; ++q)
        if ((q - z) * int(s1) >= -128 && (q - z) * int(s1) <= 127) valid.push_back(q);
      const uint32_t bias = w4a8::dequant_bias(uint32_t(z) * s1);
      // All 4-tuples of valid codes at the extremes and a rotation through the rest.
      for (size_t a = 0; a < valid.size(); ++a)
        for (size_t b = 0; b < valid.size(); ++b) {
          const int q[4] = {valid[a], valid[b], valid[(a + b) % valid.size()], valid[valid.size() - 1 - a]};
          const uint32_t q4 = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
          const uint32_t out = w4a8::dequant4(q4, s1, bias);
          for (int j = 0; j < 4; ++j)
            ASSERT_EQ(int(int8_t(uint8_t(out >> (8 * j)))), (q[j] - z) * int(s1))
                << "s1 " << s1 << " z " << z << " codes " << q[0] << "," << q[1] << "," << q[2] << "," << q[3]
                << " byte " << j;
          ++words;
        }
    }
  EXPECT_GT(words, 10000);
}

}  // namespace
}  // namespace qdec
