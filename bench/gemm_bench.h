// qdec weight-only GEMM benchmark: N x K in {4096x4096, 6144x4096, 28672x4096, 4096x14336, 8192x8192,
// 1280x8192, 8192x3584} x M in {1, 4, 16, 64, 256, 1024, 4096}, for each weight format against cuBLASLt BF16 in
// the same binary and run, and a read-bandwidth ceiling measured in the same run; optionally ResNet-50 conv
// layers (their cuDNN peer is bench/torch_conv.py). Shared by the `bench_gemm` binary and `qdec bench gemm`.
// Columns and JSON: docs/gemm.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench_clock_options.h"

namespace qdec::bench {

struct GemmBenchOptions {
  std::string formats = "int4-g128,int8";  // comma list of weight formats (qdec/weight_formats.h names)
  std::string shapes = "all";              // comma list of NxK, or "all"
  std::vector<int> m;                      // empty = 1,4,16,64,256,1024,4096
  std::string dtype = "bf16";              // X / Y dtype: bf16 or fp16 (cuBLAS peer in the same dtype)
  std::string path = "auto";               // auto, fused, dequant, wgmma (forced for every M it supports)
  int iters = 30;
  int warmup = 5;
  int graph_reps = 20;  // M <= 64: also time `graph_reps` back-to-back launches as one CUDA graph (0 = off)
  int splits = 0;       // fused / wgmma: 0 = the library's split-K choice, >= 1 forces it (GemmParams::num_splits)
  int tile_m = 0;       // wgmma path: 0 = the library's token tile, 64 or 128 forces it (GemmParams::tile_m)
  int parts = 0;        // fused path: 0 = the library's choice, 1/2/4/8 forces K parts per CTA (GemmParams::num_parts)
  std::string x_staging = "auto";  // fused path, M <= 16: auto, slice or ring (GemmParams::x_staging)
  int weight_ring = 0;  // fused path: 0 = the library's choice, 4 or 8 weight tiles in flight (GemmParams::weight_ring)
  double warm_ms = 0;   // keep the GPU busy with each case this long before its timed batch (clock ramp-up)
  double cool_ms = -1;  // leave the GPU idle this long before each case (< 0: 250 ms before each case of M >= 1024)
  bool conv = false;    // also time the ResNet-50 conv layers (qdec conv2d, fp16 input)
  bool conv_only = false;  // only the conv layers
  int conv_batch = 8;
  bool check = false;  // before timing, check each format/M against the CPU reference on a small problem
  bool pdl = false;    // also time the fused path launched with GemmParams::pdl (graph column: back-to-back calls)
  bool read_bound =
      true;               // M <= 16: also time a streaming read of each format's weight bytes (the "<format>:read" row)
  bool timeline = false;  // M <= 16: phase timelines of the fused calls and reads (a QDEC_FUSED_TIMELINE build)
  uint64_t seed = 0x5eed004;
  int device = 0;
  std::string json_path;
};

// Exit code: 0 success, 1 failure (CUDA / qdec error, failed check, bad options), 2 no CUDA device.
int run_gemm_bench(const GemmBenchOptions& opts, std::ostream& table_out);

template <class App>
void add_gemm_bench_options(App* app, GemmBenchOptions* o) {
  app->add_option("--formats", o->formats, "Comma list of weight formats (int4-g128, int8, int4zp-g32, ...)")
      ->capture_default_str();
  app->add_option("--shapes", o->shapes, "Comma list of NxK (e.g. 4096x4096) or 'all'")->capture_default_str();
  app->add_option("--m", o->m, "Comma list of M (default 1,4,16,64,256,1024,4096)")->delimiter(',');
  app->add_option("--dtype", o->dtype, "Activation dtype: bf16 or fp16")->capture_default_str();
  app->add_option("--path", o->path,
                  "auto, fused, dequant (dequantize + cuBLASLt) or wgmma (sm_90a). auto times every "
                  "path that runs at each M (fused up to M 64, wgmma from M 17, dequant above M 0) and marks kAuto's "
                  "choice with '*'")
      ->capture_default_str();
  app->add_option("--splits", o->splits, "Force the fused and wgmma paths' split-K count (0 = automatic)")
      ->capture_default_str();
  app->add_option("--tile-m", o->tile_m, "Force the wgmma path's token tile, 64, 128 or 256 (0 = automatic)")
      ->capture_default_str();
  app->add_option("--parts", o->parts,
                  "Force the fused path's K parts per CTA, 1/2/4/8 (0 = automatic). A shape the planner refuses "
                  "under --splits / --parts / --x-staging is reported as 'refused:' and skipped")
      ->capture_default_str();
  app->add_option(
         "--x-staging", o->x_staging,
         "Fused path at M <= 16: how X is staged, auto, slice or ring (the path column ends in 'r' for the ring)")
      ->capture_default_str();
  app->add_option("--weight-ring", o->weight_ring,
                  "Force the fused path's weight tiles in flight per warp: 4, or 8 (the deep ring; int8 at M <= 8 "
                  "only, elsewhere the library's choice); 0 = automatic (the path column ends in 'd8' for the deep "
                  "ring)")
      ->capture_default_str();
  app->add_option("--read-bound", o->read_bound,
                  "At M <= 16, also time the read ceiling's kernel over each format's weight bytes alone (row "
                  "'<format>:read'): the bound on any kernel's time, and x cuBLAS, for that format under this timing")
      ->capture_default_str();
  app->add_flag("--timeline", o->timeline,
                "M <= 16, library built with -DQDEC_FUSED_TIMELINE=ON: after each fused case, 7 single calls that "
                "record every warp's phase boundaries, and the same for the --read-bound read; prints the medians of "
                "their quantiles over the warps (µs from a call's first warp entry; docs/gemm.md, session 34)");
  add_clock_state_options(app, &o->warm_ms, &o->cool_ms);
  app->add_option("--iters", o->iters, "Timed launches per case (median reported)")->capture_default_str();
  app->add_option("--warmup", o->warmup, "Untimed launches per case")->capture_default_str();
  app->add_option("--graph-reps", o->graph_reps,
                  "M <= 64: also time this many back-to-back launches captured in one CUDA graph (0 = off)")
      ->capture_default_str();
  app->add_flag("--conv", o->conv, "Also time ResNet-50 conv layers (int4/int8 weights, fp16 input)");
  app->add_flag("--conv-only", o->conv_only, "Only the conv layers");
  app->add_option("--conv-batch", o->conv_batch, "Batch of the conv layers")->capture_default_str();
  app->add_flag("--check", o->check, "Check every format and M against the CPU reference on a small problem first");
  app->add_flag("--pdl", o->pdl,
                "Also time the fused path with programmatic dependent launch (rows 'fused-pdl'; it shows only in the "
                "graph column, where calls run back to back)");
  app->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  app->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  app->add_option("--json", o->json_path, "Write every case, the device and the ceiling to this JSON file");
}

}  // namespace qdec::bench
