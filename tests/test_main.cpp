#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::printf("qdec tests: QDEC_TEST_SEED=%llu\n", static_cast<unsigned long long>(qdec_test_seed()));
  std::fflush(stdout);
  return RUN_ALL_TESTS();
}
