// The float64 CPU reference against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qdec/attention.h"

namespace qdec {
namespace {

TEST(Reference, SingleTokenReturnsItsValue) {
  const int D = 4;
  std::vector<double> q{1, 2, 3, 4}, k{0.5, -1, 2, 0}, v{7, -3, 0.25, 9}, o(4), lse(1);
  const int32_t len = 1;
  decode_attention_reference(1, 1, 1, D, 1, 0.5, q.data(), k.data(), v.data(), &len, o.data(), lse.data());
  for (int d = 0; d < D; ++d) EXPECT_DOUBLE_EQ(o[d], v[d]);
  EXPECT_DOUBLE_EQ(lse[0], 0.5 * (0.5 - 2 + 6));  // the one scaled score
}

TEST(Reference, TwoTokensHandComputed) {
  // Scores 0 and ln(3) (sm_scale 1): weights 1/4 and 3/4.
  const int D = 2;
  std::vector<double> q{1, 0};
  std::vector<double> k{0, 5, std::log(3.0), -2};  // [t][d]
  std::vector<double> v{4, 8, 0, -4};
  std::vector<double> o(2), lse(1);
  const int32_t len = 2;
  decode_attention_reference(1, 1, 1, D, 2, 1.0, q.data(), k.data(), v.data(), &len, o.data(), lse.data());
  EXPECT_NEAR(o[0], 1.0, 1e-15);
  EXPECT_NEAR(o[1], -1.0, 1e-15);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-15);
}

TEST(Reference, GqaMapsHeadsAndIgnoresTokensPastLength) {
  // 4 query heads over 2 KV heads (group 2); sequence 1 has length 1 of t_max 3.
  const int B = 2, HQ = 4, HKV = 2, D = 1, T = 3;
  std::vector<double> q(B * HQ * D, 1.0);
  std::vector<double> k(B * T * HKV * D, 0.0), v(B * T * HKV * D);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < HKV; ++h) v[(b * T + t) * HKV + h] = 100 * b + 10 * h + t;
  const int32_t lens[2] = {3, 1};
  std::vector<double> o(B * HQ * D);
  decode_attention_reference(B, HQ, HKV, D, T, 1.0, q.data(), k.data(), v.data(), lens, o.data(), nullptr);
  // Equal scores: the mean of V over the valid tokens of the head's KV head.
  EXPECT_DOUBLE_EQ(o[0], 1.0);    // b0, q0 -> kv0: mean(0,1,2)
  EXPECT_DOUBLE_EQ(o[1], 1.0);    // b0, q1 -> kv0
  EXPECT_DOUBLE_EQ(o[2], 11.0);   // b0, q2 -> kv1: mean(10,11,12)
  EXPECT_DOUBLE_EQ(o[5], 100.0);  // b1, q1 -> kv0: token 0 only
  EXPECT_DOUBLE_EQ(o[7], 110.0);  // b1, q3 -> kv1
}

}  // namespace
}  // namespace qdec
