// `qdec bench int8`: the INT8 tensor-core benchmark (bench/int8_bench.h; the same code as bench_int8).
#include <iostream>
#include <memory>

#include "commands.h"
#include "int8_bench.h"

namespace qdec::cli {

void register_bench_int8_command(CLI::App& bench, Registry& reg) {
  auto opts = std::make_shared<qdec::bench::Int8BenchOptions>();
  auto* sub = bench.add_subcommand("int8", "INT8 tensor-core benchmark (W8A8, W4A8, RMSNorm + quantize)");
  qdec::bench::add_int8_bench_options(sub, opts.get());
  reg.add(sub, [opts] { return qdec::bench::run_int8_bench(*opts, std::cout); });
}

}  // namespace qdec::cli
