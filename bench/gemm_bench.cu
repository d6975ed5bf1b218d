// Weight-only GEMM benchmark (see gemm_bench.h; columns in docs/gemm.md).
//
// How a case is measured:
//   - Inputs are random, never zeros: a hash-of-index kernel fills X and the BF16 peer's W with values in
//     [-1, 1), packed codes with random bytes and the meta with small positive scales (and offsets).
//   - Inputs are rotated: enough independent (W, X, Y) sets that together they exceed 4x L2, so each launch
//     streams its weights from DRAM, as a decode step does.
//   - A spin kernel holds the stream while the host enqueues all timed launches, each between its own pair
//     of CUDA events, so host launch cost never shows as GPU time; the median is reported.
//   - Bytes: weight codes + meta (or the BF16 weight), X read, Y written. GB/s is 10^9 bytes/s, "% ceil" the
//     share of a read-only streaming kernel's bandwidth measured at the start of the same run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__NVCC__) && !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.cuh"
#include "bench_timer.cuh"
#include "gemm/cublaslt.h"
#include "gemm/dequant_kernel.cuh"
#include "gemm/fused_timeline.h"
#include "gemm_bench.h"
#include "qdec/formats.h"
#include "qdec/gemm.h"
#include "qdec/weight_formats.h"

namespace qdec::bench {
namespace {

using json = nlohmann::json;

// kind 0: bf16 pairs in [-1, 1); 1: fp16 pairs; 2: raw bits; 3: int4 meta (fp16 scale, fp16 offset);
// 4: int8 meta (two fp16 scales); 5: int4-zp meta (fp16 scale, zero point 0..15).
__global__ void fill_kernel(uint32_t* buf, uint64_t n_words, int kind, uint64_t seed) {
  for (uint64_t w = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; w < n_words;
       w += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(w ^ seed);
    const uint32_t r0 = uint32_t(h), r1 = uint32_t(h >> 32);
    uint32_t out = r0;
    if (kind == 0) {
      out = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(2.f * unit_float(r0) - 1.f))) |
            (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(2.f * unit_float(r1) - 1.f))) << 16);
    } else if (kind == 1) {
      out = uint32_t(__half_as_ushort(__float2half_rn(2.f * unit_float(r0) - 1.f))) |
            (uint32_t(__half_as_ushort(__float2half_rn(2.f * unit_float(r1) - 1.f))) << 16);
    } else if (kind == 3) {
      out = uint32_t(__half_as_ushort(__float2half_rn(0.001f + 0.001f * unit_float(r0)))) |
            (uint32_t(__half_as_ushort(__float2half_rn(0.02f * unit_float(r1) - 0.01f))) << 16);
    } else if (kind == 4) {
      out = uint32_t(__half_as_ushort(__float2half_rn(0.0001f + 0.0001f * unit_float(r0)))) |
            (uint32_t(__half_as_ushort(__float2half_rn(0.0001f + 0.0001f * unit_float(r1)))) << 16);
    } else if (kind == 5) {
      out = uint32_t(__half_as_ushort(__float2half_rn(0.001f + 0.001f * unit_float(r0)))) |
            (uint32_t(__half_as_ushort(__float2half_rn(float(r1 % 16)))) << 16);
    }
    buf[w] = out;
  }
}

void fill(const Buf& b, int kind, uint64_t seed, cudaStream_t s) {
  const uint64_t words = b.bytes() / 4;
  if (!words) return;
  fill_kernel<<<unsigned(std::min<uint64_t>((words + 255) / 256, 4096)), 256, 0, s>>>(static_cast<uint32_t*>(b.get()),
                                                                                      words, kind, mix64(seed));
  BENCH_CUDA(cudaGetLastError());
}

struct ShapeNK {
  int n, k;
};

std::vector<ShapeNK> parse_shapes(const std::string& spec) {
  const std::vector<ShapeNK> all = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336},
                                    {8192, 8192}, {1280, 8192}, {8192, 3584}};
  if (spec == "all") return all;
  std::vector<ShapeNK> out;
  for (const std::string& it : split_list(spec, ',')) {
    const size_t x = it.find('x');
    if (x == std::string::npos) throw BenchError("--shapes: '" + it + "' is not NxK");
    out.push_back({std::stoi(it.substr(0, x)), std::stoi(it.substr(x + 1))});
    if (out.back().n < 1 || out.back().k < 1) throw BenchError("--shapes: '" + it + "' has a dimension < 1");
  }
  return out;
}

int meta_fill_kind(WeightKind k) {
  return k == WeightKind::kINT8 ? 4 : k == WeightKind::kINT4ZeroPoint ? 5 : 3;
}

// ---- Correctness check on a small problem (--check) -------------------------------------------------------
void check_small(const WeightFormat& f, GemmDType dt, int m, GemmPath path, cudaStream_t s) {
  const int n = 300, k = 1000;
  std::mt19937_64 rng(1234 + m);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> w(size_t(n) * k);
  for (auto& v : w) v = 0.02f * nd(rng);
  PackedWeights pw;
  check_status(quantize_weights(w.data(), n, k, f, &pw), "quantize");
  std::vector<double> wd(w.size());
  dequantize_weights_f64(pw, wd.data());
  std::vector<uint16_t> xb(size_t(m) * k);
  std::vector<double> xd(xb.size());
  for (size_t i = 0; i < xb.size(); ++i) {
    xb[i] = dt == GemmDType::kBF16 ? float_to_bf16_bits(nd(rng)) : float_to_fp16_bits(nd(rng));
    xd[i] = dt == GemmDType::kBF16 ? bf16_bits_to_float(xb[i]) : fp16_bits_to_float(xb[i]);
  }
  std::vector<double> ref(size_t(m) * n);
  gemm_reference(m, n, k, xd.data(), wd.data(), nullptr, Activation::kNone, ref.data());
  Buf codes(pw.codes.size()), meta(pw.meta.size()), x(xb.size() * 2), y(ref.size() * 2);
  BENCH_CUDA(cudaMemcpy(codes.get(), pw.codes.data(), pw.codes.size(), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(meta.get(), pw.meta.data(), pw.meta.size(), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(x.get(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(y.get(), 0xFF, y.bytes()));
  GemmParams p;
  p.m = m;
  p.x_dtype = p.y_dtype = dt;
  p.x = x.get();
  p.y = y.get();
  p.w = WeightView{pw.layout, codes.get(), meta.get()};
  p.path = path;
  size_t wsb = 0;
  check_status(gemm_workspace_bytes(p, &wsb), "check workspace");
  Buf ws(wsb);
  if (wsb) BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
  p.workspace = ws.get();
  p.workspace_bytes = wsb;
  check_status(gemm(p, s), "check gemm");
  BENCH_CUDA(cudaStreamSynchronize(s));
  std::vector<uint16_t> yb(ref.size());
  BENCH_CUDA(cudaMemcpy(yb.data(), y.get(), yb.size() * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < yb.size(); ++i) {
    const double v = dt == GemmDType::kBF16 ? bf16_bits_to_float(yb[i]) : fp16_bits_to_float(yb[i]);
    num += (v - ref[i]) * (v - ref[i]);
    den += ref[i] * ref[i];
  }
  const double err = std::sqrt(num / den);
  if (!(err <= 5e-3)) throw BenchError(fmt::format("check failed: {} M={} rel L2 {:.3e}", f.name(), m, err));
}

// --timeline: per-warp stamps of `calls` single calls -> one line of the medians (over the calls) of their
// quantiles over the warps, in µs from each call's first warp entry. stamps(r) runs call r (synchronized) and
// returns its table: rows of `slots` values (slot 0 the entry, 0 where the warp did not run); `cols` names the
// columns and which slot and quantile each takes (q < 0: the slot's per-SM last value, quantile -q over the SMs,
// from slot sm_slot).
constexpr int kTimelineCalls = 7;
struct TlCol {
  const char* name;
  int slot;
  double q;
};
std::string timeline_line(int calls, int slots, int sm_slot, const std::vector<TlCol>& cols,
                          const std::function<std::vector<unsigned long long>(int)>& stamps) {
  std::vector<std::vector<double>> per_col(cols.size() + 2);  // + warps, span
  for (int r = 0; r < calls; ++r) {
    const std::vector<unsigned long long> t = stamps(r);
    unsigned long long t0 = ~0ull, t1 = 0;
    int warps = 0;
    for (size_t w = 0; w * slots < t.size(); ++w) {
      if (t[w * slots] == 0) continue;
      ++warps;
      t0 = std::min(t0, t[w * slots]);
      for (int s = 0; s < slots; ++s)
        if (s != sm_slot) t1 = std::max(t1, t[w * slots + s]);
    }
    if (warps == 0) throw BenchError("--timeline: no warp recorded a stamp");
    per_col[0].push_back(warps);
    per_col[1].push_back((t1 - t0) / 1e3);
    for (size_t c = 0; c < cols.size(); ++c) {
      std::vector<double> v;
      std::map<unsigned long long, double> sm_last;
      for (size_t w = 0; w * slots < t.size(); ++w) {
        if (t[w * slots] == 0) continue;
        const double us = (double(t[w * slots + cols[c].slot]) - double(t0)) / 1e3;
        if (cols[c].q >= 0) {
          v.push_back(us);
        } else {
          double& last = sm_last[t[w * slots + sm_slot]];
          last = std::max(last, us);
        }
      }
      for (const auto& [sm, us] : sm_last) v.push_back(us);
      per_col[c + 2].push_back(quantile(v, std::abs(cols[c].q)));
    }
  }
  std::string s = fmt::format("{:.0f} warps, span {:.2f} µs |", quantile(per_col[0], 0.5), quantile(per_col[1], 0.5));
  for (size_t c = 0; c < cols.size(); ++c) s += fmt::format(" {} {:.2f}", cols[c].name, quantile(per_col[c + 2], 0.5));
  return s;
}

}  // namespace

int run_gemm_bench(const GemmBenchOptions& o, std::ostream& out) {
  try {
    // Checked before any GPU work, so that the error is the same with or without a GPU.
    if (o.timeline && !wq::fused_timeline_built())
      throw BenchError("--timeline needs a library built with -DQDEC_FUSED_TIMELINE=ON (a probe build)");
    if (!(o.warm_ms >= 0)) throw BenchError(fmt::format("--warm-ms: {} must be >= 0", o.warm_ms));
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      std::cerr << "bench gemm: no CUDA device\n";
      return 2;
    }
    BENCH_CUDA(cudaSetDevice(o.device));
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, o.device));
    if (o.iters < 1 || o.iters > 1000) throw BenchError("--iters must be in 1..1000");
    if (o.splits < 0 || o.splits > 4096) throw BenchError("--splits must be in 0..4096");
    if (o.parts != 0 && o.parts != 1 && o.parts != 2 && o.parts != 4 && o.parts != 8)
      throw BenchError("--parts must be 0, 1, 2, 4 or 8");
    if (o.weight_ring != 0 && o.weight_ring != 4 && o.weight_ring != 8)
      throw BenchError("--weight-ring must be 0, 4 or 8");
    if (o.x_staging != "auto" && o.x_staging != "slice" && o.x_staging != "ring")
      throw BenchError("--x-staging must be auto, slice or ring, not '" + o.x_staging + "'");
    const GemmXStaging x_staging = o.x_staging == "slice"  ? GemmXStaging::kSlice
                                   : o.x_staging == "ring" ? GemmXStaging::kRing
                                                           : GemmXStaging::kAuto;
    if (o.dtype != "bf16" && o.dtype != "fp16") throw BenchError("--dtype must be bf16 or fp16");
    const GemmDType dt = o.dtype == "bf16" ? GemmDType::kBF16 : GemmDType::kFP16;
    GemmPath path = GemmPath::kAuto;
    if (o.path == "fused") {
      path = GemmPath::kFused;
    } else if (o.path == "dequant") {
      path = GemmPath::kDequantCublas;
    } else if (o.path == "wgmma") {
      path = GemmPath::kWgmma;
    } else if (o.path != "auto") {
      throw BenchError("--path must be auto, fused, dequant or wgmma");
    }
    if (o.tile_m != 0 && o.tile_m != 64 && o.tile_m != 128 && o.tile_m != 256)
      throw BenchError("--tile-m must be 0, 64, 128 or 256");
    std::vector<WeightFormat> formats;
    for (const std::string& n : split_list(o.formats, ',')) {
      WeightFormat f;
      check_status(parse_weight_format(n, &f), "--formats");
      formats.push_back(f);
    }
    const std::vector<int> ms = o.m.empty() ? std::vector<int>{1, 4, 16, 64, 256, 1024, 4096} : o.m;
    for (int m : ms)
      if (m < 1 || m > 65536) throw BenchError(fmt::format("--m {} is outside 1..65536", m));
    const std::vector<ShapeNK> shapes = parse_shapes(o.shapes);
    // --read-bound rows exist at M <= 16 only.
    const bool read_bound = o.read_bound && *std::min_element(ms.begin(), ms.end()) <= 16;
    const int read_blocks = read_bound ? full_grid_blocks(read_two_stream_kernel, 512, prop.multiProcessorCount) : 0;

    cudaStream_t stream;
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Timer timer(stream, o.iters);
    timer.set_warm_ms(o.warm_ms);
    json j;
    j["device"] = {{"name", prop.name},
                   {"sm_count", prop.multiProcessorCount},
                   {"l2_bytes", prop.l2CacheSize},
                   {"cc", fmt::format("{}.{}", prop.major, prop.minor)}};
    out << fmt::format("qdec bench gemm on {} ({} SMs, {:.0f} MB L2), X/Y {}, {} iterations (median)\n", prop.name,
                       prop.multiProcessorCount, prop.l2CacheSize / 1e6, o.dtype, o.iters);

    if (o.check) {
      for (const WeightFormat& f : formats)
        for (int m : {1, 5, 16, 33, 64, 100})
          check_small(f, dt, m, m > kFusedMaxM && path == GemmPath::kFused ? GemmPath::kAuto : path, stream);
      out << "check: every format at M in {1, 5, 16, 33, 64, 100} within 5e-3 of the float64 reference\n";
    }

    // Read ceiling: a streaming read of 2 GiB.
    double ceiling_gbps = 0;
    {
      const size_t bytes = size_t(2) << 30;
      Buf buf(bytes), sink(16);
      fill(buf, 2, 1, stream);
      const int blocks = full_grid_blocks(read_stream_kernel, 512, prop.multiProcessorCount);
      const double us = timer.time(3, std::min(o.iters, 20), [&](int) {
        read_stream_kernel<<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(buf.get()), bytes / 16,
                                                       static_cast<uint32_t*>(sink.get()));
      });
      BENCH_CUDA(cudaGetLastError());
      ceiling_gbps = bytes / (us * 1e-6) / 1e9;
      j["read_ceiling_gbps"] = ceiling_gbps;
      out << fmt::format("read ceiling: {:.0f} GB/s (streaming read of 2 GiB)\n", ceiling_gbps);
      // Launch floor: an empty kernel timed the same way (each launch between its own events).
      const double floor_us = timer.time(3, o.iters, [&](int) { empty_kernel<<<1, 32, 0, stream>>>(); });
      BENCH_CUDA(cudaGetLastError());
      j["launch_floor_us"] = floor_us;
      out << fmt::format("launch floor: {:.2f} us (empty kernel, same event timing)\n", floor_us);
      j["cool_ms"] = o.cool_ms;
      j["warm_ms"] = o.warm_ms;
      out << fmt::format("cases: {}; {} ms of each case before its timed batch\n", cool_ms_note(o.cool_ms), o.warm_ms);
    }

    json cases = json::array();
    if (!o.conv_only) {
      out << fmt::format("\n{:>12} {:>5} {:>13} {:>9} {:>8} {:>9} {:>7} {:>8} {:>17} {:>7} {:>9} {:>7} {:>8}\n", "NxK",
                         "M", "format", "us", "TFLOP/s", "W GB/s", "% ceil", "x cuBLAS", "path", "SM MHz", "graph us",
                         "g %ceil", "g x cuBLAS");
      for (const ShapeNK& sh : shapes) {
        const size_t free_guess = size_t(prop.totalGlobalMem);
        const size_t bf16_w = size_t(sh.n) * sh.k * 2;
        const int max_m = *std::max_element(ms.begin(), ms.end());
        const size_t xy_bytes = (size_t(max_m) * sh.k + size_t(max_m) * sh.n) * 2;
        // Sets: together > 4x L2 for the BF16 weights, within ~35% of device memory.
        int sets = int(std::min<size_t>(8, std::max<size_t>(2, 4 * size_t(prop.l2CacheSize) / bf16_w + 1)));
        while (sets > 2 && sets * (bf16_w + xy_bytes) > free_guess * 35 / 100) --sets;
        std::vector<Buf> wb, xs, ys;
        for (int i = 0; i < sets; ++i) {
          wb.emplace_back(bf16_w);
          xs.emplace_back(size_t(max_m) * sh.k * 2);
          ys.emplace_back(size_t(max_m) * sh.n * 2);
          fill(wb.back(), dt == GemmDType::kBF16 ? 0 : 1, 100 + i, stream);
          fill(xs.back(), dt == GemmDType::kBF16 ? 0 : 1, 200 + i, stream);
        }
        Buf lt_ws(wq::kCublasWorkspaceBytes);
        // Packed weights per format, rotated the same way (at least as many sets as the BF16 peer).
        struct Packed {
          WeightFormat f;
          WeightLayout L;
          std::vector<Buf> codes, meta;
        };
        std::vector<Packed> packed;
        for (const WeightFormat& f : formats) {
          Packed p{f, WeightLayout{f, sh.n, sh.k}, {}, {}};
          const size_t wbytes = p.L.code_bytes() + p.L.meta_bytes();
          const int psets =
              int(std::min<size_t>(16, std::max<size_t>(sets, 4 * size_t(prop.l2CacheSize) / wbytes + 1)));
          for (int i = 0; i < psets; ++i) {
            p.codes.emplace_back(p.L.code_bytes());
            p.meta.emplace_back(p.L.meta_bytes());
            fill(p.codes.back(), 2, 300 + i, stream);
            fill(p.meta.back(), meta_fill_kind(f.kind), 400 + i, stream);
          }
          packed.push_back(std::move(p));
        }
        BENCH_CUDA(cudaStreamSynchronize(stream));
        for (int m : ms) {
          timer.set_cool_ms(cool_ms_for(o.cool_ms, m));
          const double flops = 2.0 * m * double(sh.n) * sh.k;
          const double xy = (double(m) * sh.k + double(m) * sh.n) * 2;
          // Graph-replay timing (time_graph) for decode-sized M only; 0 = not timed.
          const bool graph = m <= kFusedMaxM && o.graph_reps > 0;
          auto lt_launch = [&](int i) {
            const int s = i % sets;
            check_status(wq::cublaslt_gemm(dt == GemmDType::kBF16, int(dt), m, sh.n, sh.k, xs[s].get(), sh.k,
                                           wb[s].get(), ys[s].get(), sh.n, lt_ws.get(), lt_ws.bytes(), stream),
                         "cuBLASLt");
          };
          // cuBLASLt is timed before and after the qdec rows (the clock drifts with the card's temperature over a
          // run); "x cuBLAS" divides by the faster of the two.
          const double lt_us_before = timer.time(o.warmup, o.iters, lt_launch);
          const double lt_mhz_before = timer.last_sm_mhz();
          BENCH_CUDA(cudaGetLastError());
          const double lt_g_before = graph ? timer.time_graph(o.graph_reps, o.iters, lt_launch) : 0.0;
          const std::string nk = fmt::format("{}x{}", sh.n, sh.k);
          struct Row {
            std::string name, path;
            double us, wbytes, mhz, graph_us;
            bool dequant_only;
          };
          std::vector<Row> rows;
          std::vector<std::string> tl_lines;  // --timeline
          for (Packed& pk : packed) {
            // With --path auto every path that runs at this M is timed (the switch points are chosen from these
            // rows): the fused kernel up to kFusedMaxM, the wgmma path above M 16 (at M <= 16 the fused kernel was
            // faster on every shape, session 43), the dequantize path everywhere; kAuto's pick is marked with '*'.
            std::vector<GemmPath> variant_paths;
            if (path == GemmPath::kAuto) {
              if (m <= kFusedMaxM) variant_paths.push_back(GemmPath::kFused);
              variant_paths.push_back(GemmPath::kDequantCublas);
              if (m > 16) variant_paths.push_back(GemmPath::kWgmma);
            } else {
              variant_paths.push_back(path == GemmPath::kFused && m > kFusedMaxM ? GemmPath::kAuto : path);
            }
            const bool both = variant_paths.size() > 1;
            // The call's operands (the first rotation set), path kAuto.
            auto base_params = [&] {
              GemmParams q;
              q.m = m;
              q.x_dtype = q.y_dtype = dt;
              q.w = WeightView{pk.L, pk.codes[0].get(), pk.meta[0].get()};
              q.x = xs[0].get();
              q.y = ys[0].get();
              return q;
            };
            GemmPath auto_path = GemmPath::kAuto;
            check_status(gemm_plan(base_params(), &auto_path, nullptr), "plan (auto)");
            // --pdl: one more row, the fused path launched as a programmatic dependent (GemmParams::pdl).
            const bool with_pdl =
                o.pdl && m <= kFusedMaxM && path != GemmPath::kDequantCublas && path != GemmPath::kWgmma;
            const int variants = int(variant_paths.size()) + (with_pdl ? 1 : 0);
            for (int variant = 0; variant < variants; ++variant) {
              const bool pdl_row = with_pdl && variant == variants - 1;
              GemmParams p = base_params();
              p.path = pdl_row ? GemmPath::kFused : variant_paths[size_t(variant)];
              if (pdl_row) p.pdl = true;
              if (p.path == GemmPath::kWgmma) p.tile_m = o.tile_m;
              p.num_splits = p.path == GemmPath::kDequantCublas ? 0 : o.splits;
              const bool fused_like = p.path == GemmPath::kFused || p.path == GemmPath::kAuto;
              p.num_parts = fused_like ? o.parts : 0;
              p.x_staging = fused_like && m <= 16 ? x_staging : GemmXStaging::kAuto;
              // The deep ring exists for int8 at M <= 8 only: elsewhere --weight-ring 8 leaves the choice to the
              // library (--weight-ring 4 applies everywhere on the fused path).
              const bool deep_ok = weight_bits(pk.L.format.kind) == 8 && m <= 8;
              p.weight_ring = !fused_like || (o.weight_ring == 8 && !deep_ok) ? 0 : o.weight_ring;
              size_t wsb = 0;
              {
                // A launch shape forced by --splits / --parts / --x-staging that the planner refuses for this shape
                // (e.g. the ring with parts over uneven slices) is reported and skipped, so that a grid of forced
                // shapes runs through; every other error ends the run.
                const Status s = gemm_workspace_bytes(p, &wsb);
                const bool forced = p.num_splits > 0 || p.num_parts > 0 || p.x_staging != GemmXStaging::kAuto ||
                                    p.weight_ring > 0 || p.tile_m > 0 || p.path == GemmPath::kWgmma;
                if (!s.ok() && forced &&
                    (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported)) {
                  out << fmt::format("  {:>10} {:>5} {:>13}  refused: {}\n", nk, m, pk.f.name(), s.message());
                  continue;
                }
                check_status(s, "workspace");
              }
              GemmPath used;
              int splits = 0, parts = 0;
              GemmXStaging staged = GemmXStaging::kAuto;
              int ring = 0, tile_m = 0;
              check_status(gemm_plan(p, &used, &splits, &parts, &staged, &ring, &tile_m), "plan");
              Buf ws(wsb);
              if (wsb) BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
              p.workspace = ws.get();
              p.workspace_bytes = wsb;
              const int psets = int(pk.codes.size());
              auto launch = [&](int i) {
                p.w.codes = pk.codes[i % psets].get();
                p.w.meta = pk.meta[i % psets].get();
                p.x = xs[i % sets].get();
                p.y = ys[i % sets].get();
                check_status(gemm(p, stream), "gemm");
              };
              const double us = timer.time(o.warmup, o.iters, launch);
              const double mhz = timer.last_sm_mhz();
              BENCH_CUDA(cudaGetLastError());
              const double g_us = graph ? timer.time_graph(o.graph_reps, o.iters, launch) : 0.0;
              const bool is_auto = path == GemmPath::kAuto && used == auto_path;
              const std::string pth =
                  (used == GemmPath::kFused
                       ? fmt::format("{} s{}p{}{}{}", pdl_row ? "fused-pdl" : "fused", splits, parts,
                                     staged == GemmXStaging::kRing ? "r" : "", ring == 8 ? "d8" : "")
                   : used == GemmPath::kWgmma ? fmt::format("wgmma t{} s{}", tile_m, splits)
                                              : std::string("dequant+cublaslt")) +
                  (both && is_auto && !pdl_row ? "*" : "");
              rows.push_back({pk.f.name(), pth, us, double(pk.L.code_bytes() + pk.L.meta_bytes()), mhz, g_us, false});
              if (o.timeline && used == GemmPath::kFused && m <= 16) {
                const int bits = weight_bits(pk.L.format.kind);
                const std::vector<TlCol> cols = {
                    {"entry p50", wq::kFusedTlEntry, 0.5},      {"max", wq::kFusedTlEntry, 1},
                    {"ready p50", wq::kFusedTlReady, 0.5},      {"max", wq::kFusedTlReady, 1},
                    {"loop end p10", wq::kFusedTlLoopEnd, 0.1}, {"p50", wq::kFusedTlLoopEnd, 0.5},
                    {"p90", wq::kFusedTlLoopEnd, 0.9},          {"max", wq::kFusedTlLoopEnd, 1},
                    {"exit p50", wq::kFusedTlExit, 0.5},        {"max", wq::kFusedTlExit, 1},
                    {"SM done p10", wq::kFusedTlExit, -0.1},    {"p50", wq::kFusedTlExit, -0.5}};
                tl_lines.push_back(
                    fmt::format("timeline {:>10} M={:<2} {:>13} {}: {}", nk, m, pk.f.name(), pth,
                                timeline_line(kTimelineCalls, wq::kFusedTlSlots, wq::kFusedTlSm, cols, [&](int r) {
                                  check_status(wq::fused_timeline(bits, true, nullptr), "--timeline");
                                  launch(r);
                                  BENCH_CUDA(cudaStreamSynchronize(stream));
                                  std::vector<unsigned long long> t;
                                  check_status(wq::fused_timeline(bits, false, &t), "--timeline");
                                  return t;
                                })));
              }
              if (used == GemmPath::kDequantCublas && m >= 2048 && variant == 0) {
                // The dequantize kernel alone (the whole weight into the scratch), so that the path's time splits
                // into dequantization + cuBLASLt. Its GB/s counts codes + meta read and the 16-bit scratch written.
                wq::DequantParams dp{};
                dp.meta = static_cast<const uint8_t*>(pk.meta[0].get());
                dp.out = ws.get();
                dp.n = pk.L.n;
                dp.k = pk.L.k;
                dp.n_pad = pk.L.n_pad();
                dp.k_pad = pk.L.k_pad();
                dp.bits = weight_bits(pk.L.format.kind);
                dp.group_k = pk.L.group_k();
                dp.zero_point = pk.L.format.kind == WeightKind::kINT4ZeroPoint ? 1 : 0;
                dp.out_bf16 = dt == GemmDType::kBF16 ? 1 : 0;
                dp.row_begin = 0;
                dp.row_end = pk.L.n;
                const double dq_us = timer.time(o.warmup, o.iters, [&](int i) {
                  dp.codes = static_cast<const uint8_t*>(pk.codes[i % psets].get());
                  dp.meta = static_cast<const uint8_t*>(pk.meta[i % psets].get());
                  check_status(wq::launch_dequant(dp, stream), "dequant");
                });
                const double moved = double(pk.L.code_bytes() + pk.L.meta_bytes()) + double(sh.n) * sh.k * 2;
                rows.push_back({pk.f.name(), "dequant kernel", dq_us, moved, timer.last_sm_mhz(), 0.0, true});
              }
            }
          }
          // --read-bound (M <= 16): the read ceiling's streaming kernel over exactly the codes and scales each GEMM
          // call reads (the same rotated buffers, both in one launch; a scale buffer's last partial 16 bytes not
          // read), timed the same way: what any kernel that must read those bytes could show under this timing, and
          // so the largest "x cuBLAS" the format can reach at this shape in this run.
          if (read_bound && m <= 16) {
            Buf sink(16);
            for (Packed& pk : packed) {
              const int psets = int(pk.codes.size());
              const size_t wbytes = pk.L.code_bytes() + pk.L.meta_bytes();
              auto read = [&](int i) {
                read_two_stream_kernel<<<read_blocks, 512, 0, stream>>>(
                    static_cast<const uint4*>(pk.codes[i % psets].get()), pk.L.code_bytes() / 16,
                    static_cast<const uint4*>(pk.meta[i % psets].get()), pk.L.meta_bytes() / 16,
                    static_cast<uint32_t*>(sink.get()));
              };
              const double us = timer.time(o.warmup, o.iters, read);
              const double mhz = timer.last_sm_mhz();
              BENCH_CUDA(cudaGetLastError());
              const double g_us = graph ? timer.time_graph(o.graph_reps, o.iters, read) : 0.0;
              rows.push_back({pk.f.name() + ":read", "stream read", us, double(wbytes), mhz, g_us, false});
              if (o.timeline) {
                // The read's warps: entry and exit only (no SM id), so no per-SM columns.
                const int max_warps = read_blocks * 16;
                Buf tl(size_t(max_warps) * 2 * sizeof(unsigned long long));
                const std::vector<TlCol> cols = {{"entry p50", 0, 0.5}, {"max", 0, 1},   {"exit p10", 1, 0.1},
                                                 {"p50", 1, 0.5},       {"p90", 1, 0.9}, {"max", 1, 1}};
                tl_lines.push_back(fmt::format(
                    "timeline {:>10} M={:<2} {:>13} {}: {}", nk, m, pk.f.name() + ":read", "stream read",
                    timeline_line(kTimelineCalls, 2, -1, cols, [&](int r) {
                      BENCH_CUDA(cudaMemsetAsync(tl.get(), 0, tl.bytes(), stream));
                      read_two_stream_tl_kernel<<<read_blocks, 512, 0, stream>>>(
                          static_cast<const uint4*>(pk.codes[r % psets].get()), pk.L.code_bytes() / 16,
                          static_cast<const uint4*>(pk.meta[r % psets].get()), pk.L.meta_bytes() / 16,
                          static_cast<uint32_t*>(sink.get()), static_cast<unsigned long long*>(tl.get()), max_warps);
                      BENCH_CUDA(cudaGetLastError());
                      BENCH_CUDA(cudaStreamSynchronize(stream));
                      std::vector<unsigned long long> t(size_t(max_warps) * 2);
                      BENCH_CUDA(cudaMemcpy(t.data(), tl.get(), tl.bytes(), cudaMemcpyDeviceToHost));
                      return t;
                    })));
              }
            }
          }
          const double lt_us_after = timer.time(o.warmup, o.iters, lt_launch);
          const double lt_mhz_after = timer.last_sm_mhz();
          const double lt_g_after = graph ? timer.time_graph(o.graph_reps, o.iters, lt_launch) : 0.0;
          const double lt_us = std::min(lt_us_before, lt_us_after);
          const double lt_g = std::min(lt_g_before, lt_g_after);
          auto print = [&](const std::string& name, double us, double wbytes, double speedup, const std::string& pth,
                           double mhz, double g_us, double g_speedup) {
            const double pct = 100.0 * (wbytes + xy) / (us * 1e-6) / 1e9 / ceiling_gbps;
            const double g_pct = g_us > 0 ? 100.0 * (wbytes + xy) / (g_us * 1e-6) / 1e9 / ceiling_gbps : 0.0;
            out << fmt::format("{:>12} {:>5} {:>13} {:>9.2f} {:>8.1f} {:>9.0f} {:>6.1f}% {:>7.2f}x {:>17} {:>7.0f}", nk,
                               m, name, us, flops / (us * 1e-6) / 1e12, wbytes / (us * 1e-6) / 1e9, pct, speedup, pth,
                               mhz);
            if (g_us > 0) {
              out << fmt::format(" {:>9.2f} {:>6.1f}% {:>7.2f}x\n", g_us, g_pct, g_speedup);
            } else {
              out << "\n";
            }
            cases.push_back({{"n", sh.n},
                             {"k", sh.k},
                             {"m", m},
                             {"format", name},
                             {"us", us},
                             {"tflops", flops / (us * 1e-6) / 1e12},
                             {"weight_bytes", wbytes},
                             {"bytes", wbytes + xy},
                             {"weight_gbps", wbytes / (us * 1e-6) / 1e9},
                             {"pct_ceiling", pct},
                             {"x_cublas", speedup},
                             {"path", pth},
                             {"sm_mhz", mhz},
                             {"graph_us", g_us},
                             {"graph_pct_ceiling", g_pct},
                             {"graph_x_cublas", g_speedup}});
          };
          print("cublas-" + o.dtype, lt_us_before, double(bf16_w), lt_us / lt_us_before, "cublaslt (before)",
                lt_mhz_before, lt_g_before, lt_g_before > 0 ? lt_g / lt_g_before : 0.0);
          for (const Row& r : rows) {
            if (r.dequant_only) {
              out << fmt::format("{:>12} {:>5} {:>13} {:>9.2f} {:>8} {:>9.0f} {:>6.1f}% {:>8} {:>17} {:>7.0f}\n", nk, m,
                                 r.name, r.us, "-", r.wbytes / (r.us * 1e-6) / 1e9,
                                 100.0 * r.wbytes / (r.us * 1e-6) / 1e9 / ceiling_gbps, "-", r.path, r.mhz);
              cases.push_back({{"n", sh.n},
                               {"k", sh.k},
                               {"m", m},
                               {"format", r.name},
                               {"us", r.us},
                               {"bytes", r.wbytes},
                               {"gbps", r.wbytes / (r.us * 1e-6) / 1e9},
                               {"path", r.path}});
              continue;
            }
            print(r.name, r.us, r.wbytes, lt_us / r.us, r.path, r.mhz, r.graph_us,
                  r.graph_us > 0 ? lt_g / r.graph_us : 0.0);
          }
          print("cublas-" + o.dtype, lt_us_after, double(bf16_w), lt_us / lt_us_after, "cublaslt (after)", lt_mhz_after,
                lt_g_after, lt_g_after > 0 ? lt_g / lt_g_after : 0.0);
          for (const std::string& l : tl_lines) out << l << "\n";
        }
      }
    }
    j["gemm"] = cases;

    if (o.conv || o.conv_only) {
      struct Layer {
        const char* name;
        int ci, h, co, k, s, p;
      };
      const Layer layers[] = {{"conv2_3x3", 64, 56, 64, 3, 1, 1},
                              {"conv2_1x1", 64, 56, 256, 1, 1, 0},
                              {"conv3_3x3s2", 128, 56, 128, 3, 2, 1},
                              {"conv4_3x3", 256, 14, 256, 3, 1, 1},
                              {"conv5_1x1", 2048, 7, 512, 1, 1, 0}};
      json conv = json::array();
      out << fmt::format("\nResNet-50 conv layers, batch {}, fp16 NCHW in/out (cuDNN peer: bench/torch_conv.py)\n",
                         o.conv_batch);
      out << fmt::format("{:>12} {:>10} {:>9} {:>8} {:>17}\n", "layer", "format", "us", "TFLOP/s", "path");
      for (const Layer& l : layers) {
        for (const char* fname : {"int4-g32", "int8"}) {
          WeightFormat f;
          check_status(parse_weight_format(fname, &f), "conv format");
          Conv2dParams p;
          p.batch = o.conv_batch;
          p.in_channels = l.ci;
          p.in_h = p.in_w = l.h;
          p.out_channels = l.co;
          p.kernel_h = p.kernel_w = l.k;
          p.stride_h = p.stride_w = l.s;
          p.pad_h = p.pad_w = l.p;
          p.dtype = GemmDType::kFP16;
          const WeightLayout L{f, l.co, l.k * l.k * l.ci};
          Buf codes(L.code_bytes()), meta(L.meta_bytes());
          fill(codes, 2, 500, stream);
          fill(meta, meta_fill_kind(f.kind), 501, stream);
          Buf in(size_t(p.batch) * l.ci * l.h * l.h * 2), outb(size_t(p.batch) * l.co * p.out_h() * p.out_w() * 2);
          fill(in, 1, 502, stream);
          p.w = WeightView{L, codes.get(), meta.get()};
          p.input = in.get();
          p.output = outb.get();
          size_t wsb = 0;
          check_status(conv2d_workspace_bytes(p, &wsb), "conv workspace");
          Buf ws(wsb);
          BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
          p.workspace = ws.get();
          p.workspace_bytes = wsb;
          timer.set_cool_ms(std::max(o.cool_ms, 0.0));
          const double us = timer.time(o.warmup, o.iters, [&](int) { check_status(conv2d(p, stream), "conv2d"); });
          BENCH_CUDA(cudaGetLastError());
          const double flops = 2.0 * p.batch * l.co * p.out_h() * p.out_w() * double(l.ci) * l.k * l.k;
          GemmPath gpath = GemmPath::kAuto;
          check_status(conv2d_gemm_path(p, &gpath), "conv GEMM path");
          const std::string pth = std::string("im2col+") + gemm_path_name(gpath);
          out << fmt::format("{:>12} {:>10} {:>9.2f} {:>8.2f} {:>17}\n", l.name, fname, us, flops / (us * 1e-6) / 1e12,
                             pth);
          conv.push_back({{"layer", l.name},
                          {"batch", p.batch},
                          {"ci", l.ci},
                          {"h", l.h},
                          {"co", l.co},
                          {"k", l.k},
                          {"stride", l.s},
                          {"pad", l.p},
                          {"format", fname},
                          {"us", us},
                          {"tflops", flops / (us * 1e-6) / 1e12},
                          {"path", pth}});
        }
      }
      j["conv"] = conv;
    }
    BENCH_CUDA(cudaStreamDestroy(stream));
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path);
      f << j.dump(1) << "\n";
      if (!f) throw BenchError("cannot write " + o.json_path);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench gemm: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace qdec::bench
