// Helpers shared by the qdec tests: a per-process random seed (reproducible through QDEC_TEST_SEED) and
// error metrics.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

// The seed of this process: QDEC_TEST_SEED (decimal or 0x-prefixed hex) when set, otherwise fresh
// randomness, so every run explores new inputs and a failing run can be replayed exactly.
inline uint64_t qdec_test_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("QDEC_TEST_SEED"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 0);
      if (end != nullptr && *end == '\0') return static_cast<uint64_t>(v);
      std::fprintf(stderr, "QDEC_TEST_SEED='%s' is not a number; using a random seed\n", env);
    }
    std::random_device rd;
    const uint64_t hi = rd(), lo = rd();
    return (hi << 32) ^ lo ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

inline std::string qdec_seed_message() {
  return "rerun with QDEC_TEST_SEED=" + std::to_string(qdec_test_seed()) + " to reproduce";
}

// Records the process seed on the running test (XML/JSON output) and returns a seed for this test's
// generator. Mixing in the test name keeps each test's inputs independent of which other tests run, so
// --gtest_filter plus QDEC_TEST_SEED replays one test exactly.
inline uint64_t qdec_test_rng_seed() {
  ::testing::Test::RecordProperty("qdec_test_seed", std::to_string(qdec_test_seed()));
  uint64_t h = qdec_test_seed() ^ 0x9E3779B97F4A7C15ull;
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info(); info != nullptr) {
    for (const char* s : {info->test_suite_name(), ".", info->name()}) {
      for (; *s != '\0'; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001B3ull;
    }
  }
  return h;
}

// Declares `std::mt19937_64 name` seeded for this test; any failure in the scope prints the seed.
#define QDEC_TEST_RNG(name)          \
  SCOPED_TRACE(qdec_seed_message()); \
  std::mt19937_64 name(qdec_test_rng_seed())

// Relative L2 error ||a - ref|| / ||ref||; +inf if any value is NaN (or the difference is not finite).
inline double rel_l2(const double* a, const double* ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (std::isnan(num) || std::isnan(den)) return std::numeric_limits<double>::infinity();
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  const double r = std::sqrt(num) / std::sqrt(den);
  return std::isnan(r) ? std::numeric_limits<double>::infinity() : r;
}

// Path of the SmolLM2 GGUF for the model tests (scripts/fetch_model.sh puts it in models/): $QDEC_MODEL, else
// the first .gguf in <source>/models, ./models or ../models; empty if there is none (the tests then skip).
inline std::string qdec_find_model() {
  if (const char* env = std::getenv("QDEC_MODEL"); env != nullptr && *env != '\0') return env;
  std::vector<std::filesystem::path> dirs = {"models", "../models"};
#ifdef QDEC_SOURCE_DIR
  dirs.insert(dirs.begin(), std::filesystem::path(QDEC_SOURCE_DIR) / "models");
#endif
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".gguf") return entry.path().string();
    }
  }
  return "";
}
