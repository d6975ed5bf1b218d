// qdec decode-attention benchmark: the shapes of seed 000's table (B in {32..512}, T = 8192, 8 query heads,
// 1 KV head, head_dim 128), long context (B = 1, 32/8 heads, T in {32K, 128K}) and a SmolLM2-like case
// (9/3 heads, head_dim 64, B = 64, T = 4096), for every KV-cache format, against a read-bandwidth ceiling
// measured in the same run. Shared by the `bench_attention` binary and `qdec bench attention`;
// bench/README.md explains the columns and the JSON.
//
// The header is plain C++ (no CUDA, no CLI11) so the CLI can include it; add_attention_bench_options() is a
// template so that it binds to CLI11 only where the caller already includes it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace qdec::bench {

struct AttentionBenchOptions {
  // Comma list of cache formats (docs/formats.md names). "K/V" gives K and V different formats
  // (e.g. "int8-g32/int4-g4"). "all" = every format of qdec::all_kv_formats() plus int8-g32/int4-g4.
  // bf16 always runs first in every shape: it is the baseline of the "x BF16" column.
  std::string formats = "all";
  // Comma list of shape families: seed000, long, smollm2, all.
  std::string shapes = "all";
  // Batch sizes of the seed000 family; empty = 32,64,128,256,512.
  std::vector<int> batch;
  // Batch sizes of the smollm2 family; empty = 64.
  std::vector<int> smollm2_batch;
  int seq_len = 8192;  // T of the seed000 family (smaller T isolates the per-call fixed cost)
  int iters = 30;      // timed launches per case, each timed on its own
  int warmup = 5;      // untimed launches per case before the timed ones
  // ... and at least this long (ms of back-to-back launches). The SM clock ramps up over the first ~1 ms of work
  // after a case's host-side set-up, which made the first case of a run read up to 10% slow (bf16 B = 32: 41.7-42.5
  // us after 5 launches, 38.4-38.5 after 2, 5 or 25 ms); 25 ms of sustained int4 load at B >= 256 already runs
  // into the 700 W power cap (+6..12%), which 5 ms did not (docs/attention.md, v22).
  double warmup_ms = 5.0;
  // Idle ms before each case (host sleep after a synchronize, ahead of its warm-up): every case then starts from a
  // rested card instead of the power state the cases before it left (the MHz column). 0 = off.
  double cool_ms = 0.0;
  int num_splits = 0;  // 0 = the library's choice; >= 1 forces a split-K count
  int cta_warps = 0;   // 0 = the library's choice; else forces DecodeAttentionParams::cta_warps
  int page_size = 64;  // tokens per tile
  // contiguous: separate K and V buffers (identity block table); paged: one K+V page pool read through a
  // randomly shuffled block table (include/qdec/kv_cache.h); both: each case both ways, with the ratio.
  std::string cache = "contiguous";
  // Paged cases also time the fused append (RoPE + quantize + write, one new token per sequence) alone and
  // followed by the attention as its programmatic dependent: us, GB/s, % of the decode step, marginal %.
  bool append = false;
  // --graph: also time `graph_reps` back-to-back calls captured in one CUDA graph, as an engine replays a decode
  // step (the "graph µs" / "% graph" columns: per call, without the ~3 us event floor of a single timed launch).
  // Off by default: the replays keep the GPU at full load ~10x longer per case, and the int4 cases at B = 512
  // that follow the large 8/16-bit ones then ran 10-18% slower (power-limited SM clock; H200, session 8).
  bool graph = false;
  // --append: also the step graphs of `graph_reps` steps: the append alone, the attention alone, and append +
  // attention (PDL); their replays alternate, so the marginal cost is a difference of medians under the same
  // conditions. 0 = off (for --graph too).
  int graph_reps = 10;
  // Paged pools: "shuffled" (a random page permutation, the default) or "sequential" (page j of sequence b at
  // b * pages_per_seq + j: the contiguous layout read through a block table; isolates the table's cost from
  // the memory system's cost of scattered pages).
  std::string page_order = "shuffled";
  // Random sequence lengths in [T/2, T] (one draw per shape, shared by all formats) instead of all T.
  bool unequal = false;
  // --read-bound (contiguous cases): also time the read ceiling's kernel over exactly each case's K and V bytes, in
  // the case's own rotated buffers and timed the same way: the "% ceil" no kernel that reads those bytes could pass
  // under this timing (a section after the table; "read_bound" in the JSON).
  bool read_bound = false;
  // --timeline (a library built with -DQDEC_DECODE_TIMELINE=ON): after each case, kTimelineCalls single calls with
  // every CTA's phase stamps (src/attention/decode_timeline.h); a section after the table gives the medians over
  // those calls of each phase's quantiles over the CTAs, in µs from the call's first CTA entry ("timeline" in the
  // JSON).
  bool timeline = false;
  // Before timing, run every (shape heads, format) on a small problem and compare with the float64 CPU
  // reference on the dequantized cache; a mismatch fails the run.
  bool check = false;
  // Hold the stream with a spin kernel while each batch of timed launches is enqueued, so that every launch queues
  // behind the previous one on the GPU rather than behind the host. Off under ncu (or any tool that runs each profiled
  // launch to completion before returning): the spin kernel would wait out its whole timeout and the run fail.
  bool hold = true;
  uint64_t seed = 0x5eed000;  // cache and query contents, unequal lengths
  int device = 0;
  std::string json_path;  // empty = no JSON
};

// Runs the benchmark, writing the human table to `table_out` (errors go to stderr). Returns a process exit
// code: 0 success, 1 failure (a CUDA error, a qdec Status error other than Unsupported, a failed check, a
// non-finite output, bad options), 2 no CUDA device. A (shape, format) the library reports Unsupported is
// listed as such in the table and the JSON and does not fail the run.
int run_attention_bench(const AttentionBenchOptions& opts, std::ostream& table_out);

// Registers the options on a CLI11 app or subcommand (App = CLI::App).
template <class App>
void add_attention_bench_options(App* app, AttentionBenchOptions* o) {
  app->add_option("--formats", o->formats,
                  "Comma list of KV formats, 'K/V' for a mixed pair, or 'all' (bf16 always runs first)")
      ->capture_default_str();
  app->add_option("--shapes", o->shapes, "Comma list of shape families: seed000, long, smollm2, all")
      ->capture_default_str();
  app->add_option("--batch", o->batch, "Batch sizes for seed000 (comma list; default 32,64,128,256,512)")
      ->delimiter(',');
  app->add_option("--smollm2-batch", o->smollm2_batch, "Batch sizes for smollm2 (comma list; default 64)")
      ->delimiter(',');
  app->add_option("--seq-len", o->seq_len, "T of the seed000 family")->capture_default_str();
  app->add_option("--iters", o->iters, "Timed iterations per case (median and min are reported)")
      ->capture_default_str();
  app->add_option("--warmup", o->warmup, "Untimed warm-up launches per case")->capture_default_str();
  app->add_option("--cool-ms", o->cool_ms,
                  "Leave the GPU idle this many ms before each case, ahead of its warm-up (0 = off)")
      ->capture_default_str();
  app->add_option("--warmup-ms", o->warmup_ms, "Keep warming up until this many ms have passed (0 = launches only)")
      ->capture_default_str();
  app->add_option("--hold", o->hold,
                  "Hold the stream while each batch of timed launches is enqueued (false under ncu, which "
                  "serializes launches)")
      ->capture_default_str();
  app->add_option("--splits", o->num_splits, "Force the split-K count (0 = automatic)")->capture_default_str();
  app->add_option("--cta-warps", o->cta_warps, "Force the warps per CTA (0 = automatic; 4, 8 or 16 where compiled)")
      ->capture_default_str();
  app->add_option("--page-size", o->page_size, "Tokens per tile (power of two, 16..256)")->capture_default_str();
  app->add_option("--cache", o->cache, "KV cache layout: contiguous, paged or both")->capture_default_str();
  app->add_flag("--append", o->append, "Also time the fused append kernel (B new tokens) per case");
  app->add_flag("--graph", o->graph, "Also time each case as a CUDA graph of --graph-reps back-to-back calls");
  app->add_option("--graph-reps", o->graph_reps, "Calls (--graph) or steps (--append) per CUDA graph (0 = off)")
      ->capture_default_str();
  app->add_option("--page-order", o->page_order, "Paged pools: shuffled or sequential pages")->capture_default_str();
  app->add_flag("--unequal", o->unequal, "Random sequence lengths in [T/2, T] instead of all equal to T");
  app->add_flag("--read-bound", o->read_bound,
                "Also time a streaming read of each contiguous case's K and V bytes (the bound on its % ceil)");
  app->add_flag("--timeline", o->timeline,
                "Per case, the phase timeline of single calls (needs a -DQDEC_DECODE_TIMELINE=ON build)");
  app->add_flag("--check", o->check, "Check every format against the CPU reference on a small problem first");
  app->add_option("--seed", o->seed, "Seed of the random cache contents and lengths")->capture_default_str();
  app->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  app->add_option("--json", o->json_path, "Write every case, the device and the ceilings to this JSON file");
}

}  // namespace qdec::bench
