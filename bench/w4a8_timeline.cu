// w4a8_timeline: where a wgmma W4A8 call's time goes, CTA by CTA (docs/int8_w4a8.md, session 21). Needs the
// library built with -DQDEC_W4A8_TIMELINE=1 (CMake option QDEC_W4A8_TIMELINE): the GEMM kernel then records
// %globaltimer at its phase boundaries (entry, first weight runs requested, first weight run, first X tile, main loop
// end, split-K partials stored, ticket won, end). (Until session 22 a permute kernel ran first; it stamped too.)
//
//   w4a8_timeline [--shape 4096x4096] [--m 128] [--path wg128] [--splits 0] [--scheme c|g128] [--reps 15]
//                 [--iters 8] [--dump FILE]
//
// Timed as the benchmarks time (bench_timer.cuh): batches of --iters calls queued behind a hold kernel, each between
// its own events, over rotation sets of weights, X and Y larger than 4x L2. After each batch the stamps are those of
// its last call. Printed per phase: the median over batches of the min / median / max over CTAs, in µs from the
// first GEMM CTA's entry. Random bytes as in
// w4a8_probe (timing does not depend on values).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "bench_timer.cuh"
#include "int8gemm/w4a8_layout.h"
#include "int8gemm/w4a8_wgmma.h"
#include "qdec/status.h"
#include "qdec/w4a8_gemm.h"

namespace qdec::w4a8 {
// The QDEC_W4A8_TIMELINE build only:
Status wgmma_timeline(bool reset, std::vector<unsigned long long>* out);
Status wgmma_cluster_capacity(int tokens, int splits, bool one_cta, int* clusters);
}  // namespace qdec::w4a8

using namespace qdec;
using qdec::bench::BenchError;

namespace {

constexpr int kSlots = 10, kCtas = 4096;

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string shape = "4096x4096", path_s = "wg128", scheme = "c", dump;
    int m = 128, splits = 0, reps = 15, iters = 8;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw BenchError(a + " needs a value");
        return argv[++i];
      };
      if (a == "--shape")
        shape = next();
      else if (a == "--m")
        m = std::stoi(next());
      else if (a == "--path")
        path_s = next();
      else if (a == "--splits")
        splits = std::stoi(next());
      else if (a == "--scheme")
        scheme = next();
      else if (a == "--reps")
        reps = std::stoi(next());
      else if (a == "--iters")
        iters = std::stoi(next());
      else if (a == "--dump")
        dump = next();
      else
        throw BenchError("unknown option " + a);
    }
    if (shape == "capacity") {  // cudaOccupancyMaxActiveClusters by token tile, cluster size, shared memory
      for (int tok : {64, 128, 256})
        for (int one : {1, 0}) {
          int occ = 0;
          bench::check_status(w4a8::wgmma_kernel_occupancy(tok, true, &occ), "occupancy");
          std::printf("wg%d (%d per SM) %s smem:", tok, occ, one ? "one-CTA" : "config");
          for (int cs = 1; cs <= 8; ++cs) {
            int c = 0;
            bench::check_status(w4a8::wgmma_cluster_capacity(tok, cs, one, &c), "capacity");
            std::printf(" %d:%d", cs, c);
          }
          std::printf("\n");
        }
      return 0;
    }
    const size_t xp = shape.find('x');
    const int n = std::stoi(shape.substr(0, xp)), k = std::stoi(shape.substr(xp + 1));
    const int gs = scheme == "c" ? 0 : std::stoi(scheme.substr(1));
    W4A8Path path = W4A8Path::kAuto;
    bool found = false;
    for (W4A8Path q : kW4A8Paths)
      if (path_s == w4a8_path_name(q)) path = q, found = true;
    if (!found) throw BenchError("--path " + path_s + ": no such path");

    const w4a8::PackedLayout lay{n, k, gs};
    const size_t wbytes = lay.total_bytes(), meta = lay.meta_bytes();
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
    const size_t set_bytes = wbytes + size_t(m) * k + size_t(m) * n * 2;
    const int sets = int(std::clamp<size_t>((size_t(4) * prop.l2CacheSize) / set_bytes + 2, 2, 64));
    std::vector<void*> w(sets), xq(sets), y(sets);
    for (int s = 0; s < sets; ++s) {
      BENCH_CUDA(cudaMalloc(&w[s], wbytes));
      BENCH_CUDA(cudaMalloc(&xq[s], size_t(m) * k));
      BENCH_CUDA(cudaMalloc(&y[s], size_t(m) * n * 2));
      bench::fill_random_words<<<1024, 256>>>(static_cast<uint32_t*>(w[s]), wbytes / 4, 7 + s);
      bench::fill_random_words<<<1024, 256>>>(static_cast<uint32_t*>(xq[s]), size_t(m) * k / 4, 1000 + s);
      if (gs)
        bench::fill_same_word<<<1024, 256>>>(
            reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(w[s]) + lay.meta_offset()), meta / 4, 0x70107010u);
    }
    void *sx, *rs;
    BENCH_CUDA(cudaMalloc(&sx, size_t(m) * 4));
    BENCH_CUDA(cudaMalloc(&rs, size_t(m) * 4));
    bench::fill_same_word<<<64, 256>>>(static_cast<uint32_t*>(sx), m, 0x3C000000u);
    bench::fill_same_word<<<64, 256>>>(static_cast<uint32_t*>(rs), m, 0);
    BENCH_CUDA(cudaGetLastError());

    W4A8Params p;
    p.x = {m, k, static_cast<int8_t*>(xq[0]), 0, static_cast<float*>(sx), static_cast<int32_t*>(rs)};
    p.w = {n, k, gs, w[0], wbytes};
    p.y = y[0];
    p.path = path;
    p.num_splits = splits;
    size_t ws_bytes = 0;
    bench::check_status(w4a8_gemm_workspace_bytes(p, &ws_bytes), "w4a8 workspace");
    void* ws = nullptr;
    BENCH_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 16)));
    BENCH_CUDA(cudaMemset(ws, 0, std::max<size_t>(ws_bytes, 16)));
    p.workspace = ws;
    p.workspace_bytes = ws_bytes;
    W4A8Path used;
    int used_splits = 0;
    bench::check_status(w4a8_gemm_plan(p, &used, &used_splits), "w4a8 plan");
    std::printf("w4a8_timeline on %s: %dx%d M=%d %s (planned %s s%d), scheme %s, %d batches of %d, %d sets\n",
                prop.name, n, k, m, path_s.c_str(), w4a8_path_name(used), used_splits, scheme.c_str(), reps, iters,
                sets);

    // Phases: {name, from slot, to slot}; slot -1 = the origin (the first GEMM CTA entry).
    struct Phase {
      const char* name;
      int from, to;
    };
    const Phase phases[] = {
        {"cta entry", -1, 0},         {"W requested", -1, 2},        {"first W", -1, 3},
        {"first X", -1, 4},           {"loop end wg0", -1, 5},       {"loop end wg1", -1, 6},
        {"partials stored", -1, 7},   {"ticket won", -1, 8},         {"cta end", -1, 9},
        {"loop (X..end)", 4, 5},      {"epilogue (end-loop)", 5, 9}, {"won..end", 8, 9},
        {"stored..end (last)", 7, 9},
    };
    constexpr int kPhases = sizeof(phases) / sizeof(phases[0]);
    std::vector<std::vector<double>> med(kPhases), mx(kPhases), mn(kPhases);
    std::vector<double> ev_us, span_us;
    std::vector<unsigned long long> tl;
    FILE* df = dump.empty() ? nullptr : std::fopen(dump.c_str(), "w");
    bench::Timer timer(nullptr, iters);
    bench::check_status(w4a8::wgmma_timeline(true, nullptr), "timeline reset");
    for (int r = 0; r < reps; ++r) {
      ev_us.push_back(timer.time(r == 0 ? 3 : 0, iters, [&](int i) {
        const int s = i % sets;
        W4A8Params q = p;
        q.x.q = static_cast<int8_t*>(xq[s]);
        q.w.data = w[s];
        q.y = y[s];
        bench::check_status(w4a8_gemm(q, nullptr), "w4a8");
      }));
      bench::check_status(w4a8::wgmma_timeline(false, &tl), "timeline read");
      int ctas = 0;
      while (ctas < kCtas && tl[size_t(ctas) * kSlots] != 0) ++ctas;
      double e0 = 1e300;
      for (int c = 0; c < ctas; ++c) e0 = std::min(e0, double(tl[size_t(c) * kSlots]));
      const double origin = e0;
      auto at = [&](int cta, int slot) -> double {
        if (slot == -1) return origin;
        const double v = double(tl[size_t(cta) * kSlots + slot]);
        return v >= double(tl[size_t(cta) * kSlots]) || slot <= 1 ? v : -1;  // stale: an earlier call's
      };
      double last = 0;
      for (int c = 0; c < ctas; ++c) last = std::max(last, at(c, 9));
      span_us.push_back((last - origin) / 1e3);
      for (int ph = 0; ph < kPhases; ++ph) {
        std::vector<double> v;
        for (int c = 0; c < ctas; ++c) {
          const double a = at(c, phases[ph].from), b = at(c, phases[ph].to);
          if (a >= 0 && b >= 0) v.push_back((b - a) / 1e3);
        }
        if (v.empty()) continue;
        med[ph].push_back(median(v));
        mx[ph].push_back(*std::max_element(v.begin(), v.end()));
        mn[ph].push_back(*std::min_element(v.begin(), v.end()));
      }
      if (df && r == reps - 1) {
        std::fprintf(df, "# cta smid entry wreq firstW firstX loop0 loop1 stored won end (ns from the origin)\n");
        for (int c = 0; c < ctas; ++c) {
          std::fprintf(df, "%d %llu", c, tl[size_t(c) * kSlots + 1]);
          for (int s : {0, 2, 3, 4, 5, 6, 7, 8, 9}) std::fprintf(df, " %.0f", at(c, s) < 0 ? -1 : at(c, s) - origin);
          std::fprintf(df, "\n");
        }
      }
    }
    if (df) std::fclose(df);
    std::printf("event time %.2f us (median of the batches' medians), origin .. last CTA end %.2f us\n", median(ev_us),
                median(span_us));
    std::printf("%-22s %8s %8s %8s   (us; medians over reps of the min / median / max over CTAs)\n", "phase", "min",
                "median", "max");
    for (int ph = 0; ph < kPhases; ++ph)
      if (!med[ph].empty())
        std::printf("%-22s %8.2f %8.2f %8.2f\n", phases[ph].name, median(mn[ph]), median(med[ph]), median(mx[ph]));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "w4a8_timeline: %s\n", e.what());
    return 1;
  }
}
