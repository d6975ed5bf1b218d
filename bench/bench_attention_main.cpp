// bench_attention: the decode-attention benchmark as its own binary (the same code runs as
// `qdec bench attention`). Options and columns: bench/README.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "attention_bench.h"

int main(int argc, char** argv) {
  CLI::App app{
      "qdec decode-attention benchmark: seed 000's table, long context and SmolLM2 shapes for every KV "
      "format, against a read-bandwidth ceiling measured in the same run"};
  qdec::bench::AttentionBenchOptions opts;
  qdec::bench::add_attention_bench_options(&app, &opts);
  CLI11_PARSE(app, argc, argv);
  return qdec::bench::run_attention_bench(opts, std::cout);
}
