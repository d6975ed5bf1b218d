// `qdec bench gemm`: the weight-only GEMM benchmark (bench/gemm_bench.h; the same code as bench_gemm).
#include <iostream>
#include <memory>

#include "commands.h"
#include "gemm_bench.h"

namespace qdec::cli {

void register_bench_gemm_command(CLI::App& bench, Registry& reg) {
  auto opts = std::make_shared<qdec::bench::GemmBenchOptions>();
  auto* sub = bench.add_subcommand("gemm", "weight-only GEMM/GEMV benchmark (W4A16/W8A16 vs cuBLASLt BF16, conv)");
  qdec::bench::add_gemm_bench_options(sub, opts.get());
  reg.add(sub, [opts] { return qdec::bench::run_gemm_bench(*opts, std::cout); });
}

}  // namespace qdec::cli
