// bench_gemm: the weight-only GEMM benchmark as its own binary (the same code runs as `qdec bench gemm`).
// Options and columns: docs/gemm.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "gemm_bench.h"

int main(int argc, char** argv) {
  CLI::App app{
      "qdec weight-only GEMM benchmark: W4A16 / W8A16 against cuBLASLt BF16 and a read-bandwidth ceiling measured "
      "in the same run, plus ResNet-50 conv layers (--conv)"};
  qdec::bench::GemmBenchOptions opts;
  qdec::bench::add_gemm_bench_options(&app, &opts);
  CLI11_PARSE(app, argc, argv);
  return qdec::bench::run_gemm_bench(opts, std::cout);
}
