// bench_int8: the INT8 tensor-core benchmark as its own binary (the same code runs as `qdec bench int8`).
// Options and columns: docs/int8_gemm.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "int8_bench.h"

int main(int argc, char** argv) {
  CLI::App app{
      "qdec INT8 benchmark: W8A8 (per channel, per K-block) and W4A8 against cuBLASLt BF16 / INT8 and qdec W4A16, "
      "and RMSNorm + int8 quantization against bandwidth ceilings measured in the same run"};
  qdec::bench::Int8BenchOptions opts;
  qdec::bench::add_int8_bench_options(&app, &opts);
  CLI11_PARSE(app, argc, argv);
  return qdec::bench::run_int8_bench(opts, std::cout);
}
