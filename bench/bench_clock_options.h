// The clock-state options of the GEMM benchmarks (bench_gemm, bench_int8): how each case starts, so that its SM clock
// does not depend on the cases before it (bench/README.md, "Compute-bound GEMM cases and the power cap").
#pragma once

namespace qdec::bench {

template <class App>
void add_clock_state_options(App* app, double* warm_ms, double* cool_ms) {
  app->add_option("--warm-ms", *warm_ms,
                  "Run each case alone this many ms before timing it, so that it is timed at the SM clock it holds "
                  "when it runs steadily (see the MHz column)")
      ->capture_default_str();
  app->add_option("--cool-ms", *cool_ms,
                  "Leave the GPU idle this many ms before each case, so that its clock does not depend on the power "
                  "the cases before it drew (< 0: 250 ms before each case of M >= 1024, none below)")
      ->capture_default_str();
}

}  // namespace qdec::bench
