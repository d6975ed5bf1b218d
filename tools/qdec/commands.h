// Subcommands of the qdec CLI live in their own translation units (cmd_*.cpp) and register here; main.cpp
// parses and runs the one that was given. Options are bound to state owned by the registering function (keep
// it alive through a shared_ptr captured by the runner).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <utility>
#include <vector>

namespace qdec::cli {

using Runner = std::function<int()>;

struct Registry {
  std::vector<std::pair<CLI::App*, Runner>> commands;
  void add(CLI::App* sub, Runner run) { commands.emplace_back(sub, std::move(run)); }
};

// `qdec plan`: the KV-cache capacity planner (cmd_plan.cpp).
void register_plan_command(CLI::App& app, Registry& reg);

// Exit codes: 0 success, 1 a failed computation or check, 2 bad usage or input (CLI11 parse errors too).

// generate, ppl, calibrate (cmd_model.cpp).
void register_model_commands(CLI::App& app, Registry& reg);

// `qdec bench int8`: the INT8 tensor-core benchmark (cmd_bench_int8.cpp; built with the benchmarks).
void register_bench_int8_command(CLI::App& bench, Registry& reg);

}  // namespace qdec::cli
