// The qdec command-line tool.
//   qdec info                      formats, bytes per token, and the CUDA device (if any)
//   qdec attention [options]       one decode-attention problem: GPU result checked against the float64
//                                  CPU reference (GPU part skipped, and said so, without a device)
//   qdec bench attention [options] the decode-attention benchmark (same as the bench_attention binary)
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "qdec/attention.h"
#include "qdec/formats.h"

#ifdef QDEC_HAVE_BENCH
#include "attention_bench.h"
namespace qdec::cli {
// `qdec bench gemm` (tools/qdec/cmd_bench_gemm.cpp).
void register_bench_gemm_command(CLI::App& bench, Registry& reg);
}  // namespace qdec::cli
#endif

namespace {

using namespace qdec;

std::string device_line(bool* have) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    *have = false;
    return fmt::format("no CUDA device ({})", err != cudaSuccess ? cudaGetErrorName(err) : "count 0");
  }
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  *have = true;
  return fmt::format("{} (sm_{}{}, {} SMs, {:.0f} MB L2, {:.1f} GB)", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.totalGlobalMem / 1e9);
}

int cmd_info() {
  bool have = false;
  fmt::print("qdec 0.1.0\ndevice: {}\n\n", device_line(&have));
  fmt::print("{:<10} {:>6} {:>12} {:>12} {:>12} {:>12}\n", "format", "bits", "B/row d64", "B/row d128", "vs bf16 d128",
             "scales");
  for (const KvFormat& f : all_kv_formats()) {
    const char* scales = f.kind == KvKind::kBF16 || f.kind == KvKind::kFP16 ? "-"
                         : f.kind == KvKind::kINT4                          ? "fp16 scale+shift/group"
                         : f.kind == KvKind::kINT8                          ? "fp16 scale/group"
                                                                            : "fp32 scale/row";
    fmt::print("{:<10} {:>6} {:>12} {:>12} {:>11.2f}x {}\n", f.name(), kv_bits(f.kind), kv_row_bytes(f, 64),
               kv_row_bytes(f, 128), 256.0 / kv_row_bytes(f, 128), scales);
  }
  return 0;
}

struct AttentionOptions {
  std::string format = "int4-g4";
  std::string k_format, v_format;
  int batch = 8, qo_heads = 32, kv_heads = 8, head_dim = 128, seq_len = 4096, page_size = 64, splits = 0;
  unsigned long long seed = 0;
};

#define CHECK_CUDA(call)                                                                                      \
  do {                                                                                                        \
    cudaError_t e_ = (call);                                                                                  \
    if (e_ != cudaSuccess) {                                                                                  \
      fmt::print(stderr, "error: {} failed: {} ({})\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
      return 1;                                                                                               \
    }                                                                                                         \
  } while (0)

int cmd_attention(const AttentionOptions& opt) {
  KvFormat kf, vf;
  const std::string kname = opt.k_format.empty() ? opt.format : opt.k_format;
  const std::string vname = opt.v_format.empty() ? opt.format : opt.v_format;
  for (auto [name, out] : {std::pair{kname, &kf}, std::pair{vname, &vf}}) {
    Status s = parse_kv_format(name, out);
    if (!s.ok()) {
      fmt::print(stderr, "error: {}\n", s.to_string());
      return 2;
    }
  }
  if (opt.batch < 1 || opt.seq_len < 1 || opt.kv_heads < 1 || opt.qo_heads < 1) {
    fmt::print(stderr, "error: batch, seq-len and head counts must be >= 1\n");
    return 2;
  }
  const uint64_t seed = opt.seed ? opt.seed : std::random_device{}();
  fmt::print("decode attention: B={} heads {}/{} head_dim {} seq_len {} K={} V={} page_size {} seed {}\n", opt.batch,
             opt.qo_heads, opt.kv_heads, opt.head_dim, opt.seq_len, kf.name(), vf.name(), opt.page_size, seed);
  const int B = opt.batch, HQ = opt.qo_heads, HKV = opt.kv_heads, D = opt.head_dim, T = opt.seq_len;
  const DType qd = kf.kind == KvKind::kFP16 ? DType::kFP16 : DType::kBF16;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> q(size_t(B) * HQ * D), k(size_t(B) * T * HKV * D), v(k.size());
  for (auto& x : q) x = nd(rng);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<uint16_t> q_bits(q.size());
  std::vector<double> q64(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q_bits[i] = qd == DType::kBF16 ? float_to_bf16_bits(q[i]) : float_to_fp16_bits(q[i]);
    q64[i] = qd == DType::kBF16 ? bf16_bits_to_float(q_bits[i]) : fp16_bits_to_float(q_bits[i]);
  }
  const ContiguousKvLayout kl{{kf, D, opt.page_size}, B, T, HKV}, vl{{vf, D, opt.page_size}, B, T, HKV};
  for (const auto* l : {&kl.tile, &vl.tile}) {
    Status s = validate_tile_layout(*l);
    if (!s.ok()) {
      fmt::print(stderr, "error: {}\n", s.to_string());
      return 2;
    }
  }
  std::vector<int32_t> lens(B, T);
  std::vector<uint8_t> kc(kl.total_bytes()), vc(vl.total_bytes());
  quantize_into_cache(kl, KvRole::kKey, k.data(), lens.data(), kc.data());
  quantize_into_cache(vl, KvRole::kValue, v.data(), lens.data(), vc.data());
  std::vector<double> k64(k.size()), v64(v.size());
  dequantize_cache_f64(kl, KvRole::kKey, kc.data(), lens.data(), k64.data());
  dequantize_cache_f64(vl, KvRole::kValue, vc.data(), lens.data(), v64.data());
  // How far the format itself is from the unquantized data, then the reference on the dequantized data.
  double num = 0, den = 0;
  for (size_t i = 0; i < k.size(); ++i) {
    num += (k64[i] - k[i]) * (k64[i] - k[i]) + (v64[i] - v[i]) * (v64[i] - v[i]);
    den += double(k[i]) * k[i] + double(v[i]) * v[i];
  }
  fmt::print("format round-trip rel L2 (K and V): {:.3e}; cache {:.1f} MB ({:.2f}x smaller than bf16)\n",
             std::sqrt(num / den), (kc.size() + vc.size()) / 1e6,
             2.0 * B * kl.pages_per_seq() * opt.page_size * HKV * D * 2 / double(kc.size() + vc.size()));
  const double sm_scale = 1.0 / std::sqrt(double(D));
  std::vector<double> o_ref(q.size());
  const auto t0 = std::chrono::steady_clock::now();
  decode_attention_reference(B, HQ, HKV, D, T, sm_scale, q64.data(), k64.data(), v64.data(), lens.data(), o_ref.data(),
                             nullptr);
  fmt::print("CPU reference: {:.1f} ms\n",
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());

  bool have = false;
  const std::string dev = device_line(&have);
  if (!have) {
    fmt::print("GPU: skipped: {}\n", dev);
    return 0;
  }
  fmt::print("GPU: {}\n", dev);
  void *d_q, *d_o, *d_k, *d_v, *d_lens, *d_ws = nullptr;
  CHECK_CUDA(cudaMalloc(&d_q, q_bits.size() * 2));
  CHECK_CUDA(cudaMalloc(&d_o, q_bits.size() * 2));
  CHECK_CUDA(cudaMalloc(&d_k, kc.size()));
  CHECK_CUDA(cudaMalloc(&d_v, vc.size()));
  CHECK_CUDA(cudaMalloc(&d_lens, lens.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_q, q_bits.data(), q_bits.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_k, kc.data(), kc.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_v, vc.data(), vc.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(d_o, 0xFF, q_bits.size() * 2));
  DecodeAttentionParams p;
  p.batch = B;
  p.num_qo_heads = HQ;
  p.num_kv_heads = HKV;
  p.q_dtype = qd;
  set_contiguous_cache(&p, kl, d_k, vl, d_v);
  p.seq_lens = static_cast<int32_t*>(d_lens);
  p.seq_lens_host = lens.data();
  p.q = d_q;
  p.o = d_o;
  p.num_splits = opt.splits;
  size_t ws = 0;
  int splits = 0;
  Status s = decode_attention_workspace_bytes(p, &ws);
  if (s.ok()) s = decode_attention_num_splits(p, &splits);
  if (!s.ok()) {
    fmt::print(stderr, "error: {}\n", s.to_string());
    return 2;
  }
  if (ws) CHECK_CUDA(cudaMalloc(&d_ws, ws));
  p.workspace = d_ws;
  p.workspace_bytes = ws;
  s = decode_attention(p, nullptr);
  if (!s.ok()) {
    fmt::print(stderr, "error: {}\n", s.to_string());
    return 1;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> o_bits(q_bits.size());
  CHECK_CUDA(cudaMemcpy(o_bits.data(), d_o, o_bits.size() * 2, cudaMemcpyDeviceToHost));
  num = den = 0;
  for (size_t i = 0; i < o_bits.size(); ++i) {
    const double x = qd == DType::kBF16 ? bf16_bits_to_float(o_bits[i]) : fp16_bits_to_float(o_bits[i]);
    num += (x - o_ref[i]) * (x - o_ref[i]);
    den += o_ref[i] * o_ref[i];
  }
  const double err = std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
  // Timing: median of 50 launches after warm-up (same inputs; see `qdec bench attention` for rotation).
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> times;
  for (int i = 0; i < 55; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    s = decode_attention(p, nullptr);
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 5) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const double us = times[times.size() / 2] * 1e3;
  const double bytes = double(B) * T * HKV * (kv_row_bytes(kf, D) + kv_row_bytes(vf, D)) + 4.0 * q.size();
  fmt::print("GPU vs reference: rel L2 {:.3e} ({}); splits {}; median {:.1f} us, {:.0f} GB/s\n", err,
             err <= 5e-3 ? "ok" : "FAIL", splits, us, bytes / us / 1e3);
  cudaFree(d_q);
  cudaFree(d_o);
  cudaFree(d_k);
  cudaFree(d_v);
  cudaFree(d_lens);
  if (d_ws) cudaFree(d_ws);
  return err <= 5e-3 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qdec: low-precision LLM decoding (KV-cache formats, fused GQA decode attention)"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "formats, bytes per token, and the CUDA device");
  AttentionOptions aopt;
  auto* att =
      app.add_subcommand("attention", "run one decode-attention problem and check it against the CPU reference");
  att->add_option("--format", aopt.format, "KV format for K and V")->capture_default_str();
  att->add_option("--k-format", aopt.k_format, "K format (overrides --format)");
  att->add_option("--v-format", aopt.v_format, "V format (overrides --format)");
  att->add_option("--batch", aopt.batch)->capture_default_str()->check(CLI::Range(1, 65535));
  att->add_option("--qo-heads", aopt.qo_heads)->capture_default_str()->check(CLI::Range(1, 4096));
  att->add_option("--kv-heads", aopt.kv_heads)->capture_default_str()->check(CLI::Range(1, 4096));
  att->add_option("--head-dim", aopt.head_dim)->capture_default_str()->check(CLI::IsMember({64, 128}));
  att->add_option("--seq-len", aopt.seq_len)->capture_default_str()->check(CLI::Range(1, 1 << 20));
  att->add_option("--page-size", aopt.page_size)->capture_default_str();
  att->add_option("--splits", aopt.splits, "split count (0 = automatic)")->capture_default_str();
  att->add_option("--seed", aopt.seed, "random seed (0 = fresh)");
#ifdef QDEC_HAVE_BENCH
  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  qdec::bench::AttentionBenchOptions bopt;
  auto* batt = bench->add_subcommand("attention", "decode-attention benchmark (seed 000's table and more)");
  qdec::bench::add_attention_bench_options(batt, &bopt);
#endif
  qdec::cli::Registry registry;
#ifdef QDEC_HAVE_BENCH
  qdec::cli::register_bench_gemm_command(*bench, registry);  // cmd_bench_gemm.cpp
  qdec::cli::register_bench_int8_command(*bench, registry);  // cmd_bench_int8.cpp
#endif
  qdec::cli::register_model_commands(app, registry);
  qdec::cli::register_plan_command(app, registry);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse error (unknown option, bad or missing
    // value, no subcommand) is a usage error: CLI11 prints its message, and the exit code is 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  for (auto& [sub, run] : registry.commands)
    if (sub->parsed()) return run();
  if (info->parsed()) return cmd_info();
  if (att->parsed()) return cmd_attention(aopt);
#ifdef QDEC_HAVE_BENCH
  if (batt->parsed()) return qdec::bench::run_attention_bench(bopt, std::cout);
#endif
  return 2;
}
