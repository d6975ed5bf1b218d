// qdec INT8 tensor-core benchmark (issue 5): the weight-only GEMM benchmark's shapes (bench/gemm_bench.h) x M,
// each case against cuBLASLt BF16, raw cuBLASLt INT8 (int32 out), qdec W4A16 (int4-g128), qdec W8A8 per channel
// (both backends, the automatic choice marked), qdec W8A8 per K-block and qdec W4A8 (group 128, per channel), in
// the same binary and run; then RMSNorm + int8 quantization (and the plain quantizer) as GB/s and % of the
// bandwidth ceilings measured in the same run. Shared by the `bench_int8` binary and `qdec bench int8`.
// Columns and JSON: docs/int8_gemm.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench_clock_options.h"

namespace qdec::bench {

struct Int8BenchOptions {
  std::string shapes = "all";  // comma list of NxK, or "all"
  std::vector<int> m;          // empty = 1,4,16,64,256,1024,4096
  std::vector<int> rms_m;      // empty = 1,16,256,1024,4096
  std::vector<int> rms_k;      // empty = 4096,8192,14336
  int block = 128;             // block of the per-K-block W8A8 rows
  bool gemm = true;            // the GEMM table
  bool rmsnorm = true;         // the RMSNorm + quantize table
  bool rms_bound = true;       // ... with a "copy bound" row per shape (the same bytes moved by a plain kernel)
  bool w8a8 = true;            // the W8A8 rows (per channel, per block)
  bool w4a8 = true;            // the W4A8 rows (prepacks random QoQ weights on the CPU: slow at large N x K)
  int mma_max_m = 1024;        // time the kMma backend up to this M (it is the slow choice above kW8A8AutoMmaMaxM)
  std::vector<std::string> w4a8_paths{"auto"};  // W4A8 paths timed per scheme: auto, t8 .. t128, dq-w8a8
  std::vector<int> w4a8_splits;                 // forced W4A8 paths: the split-K counts timed (empty = the planner's)
  std::vector<int> w8a8_splits;                 // W8A8 wgmma rows: the split-K counts timed (empty = the planner's)
  int iters = 30;
  int warmup = 5;
  double warm_ms = 0;   // keep the GPU busy with each case this long before its timed batch (0 = off)
  double cool_ms = -1;  // leave the GPU idle this long before each case (< 0: 250 ms before each case of M >= 1024)
  uint64_t seed = 0x5eed005;
  int device = 0;
  std::string json_path;
};

// Exit code: 0 success, 1 failure (CUDA / qdec error, bad options), 2 no CUDA device.
int run_int8_bench(const Int8BenchOptions& opts, std::ostream& table_out);

template <class App>
void add_int8_bench_options(App* app, Int8BenchOptions* o) {
  app->add_option("--shapes", o->shapes, "Comma list of NxK (e.g. 4096x4096) or 'all'")->capture_default_str();
  app->add_option("--m", o->m, "Comma list of M (default 1,4,16,64,256,1024,4096)")->delimiter(',');
  app->add_option("--rms-m", o->rms_m, "RMSNorm table: comma list of M (default 1,16,256,1024,4096)")->delimiter(',');
  app->add_option("--rms-k", o->rms_k, "RMSNorm table: comma list of K (default 2048,4096,8192,14336)")->delimiter(',');
  app->add_option("--block", o->block, "K-block of the per-block W8A8 rows (32, 64, 128)")->capture_default_str();
  app->add_option("--gemm", o->gemm, "Run the GEMM table (true/false)")->capture_default_str();
  app->add_option("--rmsnorm", o->rmsnorm, "Run the RMSNorm + quantize table (true/false)")->capture_default_str();
  app->add_option("--rms-bound", o->rms_bound,
                  "RMSNorm table: also a 'copy bound' row per shape, a plain kernel reading X and writing half its "
                  "bytes, timed the same way (true/false)")
      ->capture_default_str();
  app->add_option("--w8a8", o->w8a8, "Include the W8A8 rows (true/false)")->capture_default_str();
  app->add_option("--w4a8", o->w4a8, "Include the W4A8 rows (true/false)")->capture_default_str();
  app->add_option("--mma-max-m", o->mma_max_m, "Time the W8A8 mma backend up to this M")->capture_default_str();
  app->add_option(
         "--w4a8-paths", o->w4a8_paths,
         "W4A8 paths to time, comma list of auto, t8, t16, t32, t64, t128, dq-w8a8, wg64, wg128, wg256 (forced "
         "paths that equal auto's pick are timed once; '*' marks auto's pick)")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--w4a8-splits", o->w4a8_splits,
                  "Forced W4A8 paths: comma list of split-K counts to time each with (default: the planner's)")
      ->delimiter(',');
  app->add_option("--w8a8-splits", o->w8a8_splits,
                  "W8A8 wgmma backend: comma list of split-K counts to time it with, 0 = the planner's (default: 0)")
      ->delimiter(',');
  app->add_option("--iters", o->iters, "Timed launches per case (median reported)")->capture_default_str();
  app->add_option("--warmup", o->warmup, "Untimed launches per case")->capture_default_str();
  add_clock_state_options(app, &o->warm_ms, &o->cool_ms);
  app->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  app->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  app->add_option("--json", o->json_path, "Write every case, the device and the ceilings to this JSON file");
}

}  // namespace qdec::bench
