// w4a8_probe: timing of the W4A8 (QoQ) GEMM against its peers in the same run (docs/int8_w4a8.md):
// cuBLASLt INT8 (int8 x int8 -> int32, CUBLAS_COMPUTE_32I; the stand-in for W8A8), qdec::gemm int4-g128 (W4A16)
// and cuBLASLt BF16. House method (bench/gemm_bench.cu): a host-released hold kernel, every launch between its
// own CUDA events, inputs rotated over sets larger than 4x L2, medians; the read ceiling and the launch floor are
// measured in the same run. Timing does not depend on the values, so buffers hold random bytes (W4A8 group meta
// and fp16 scales are set to valid values).
//
//   w4a8_probe [--shapes 4096x4096,...|all] [--m 1,16,256] [--iters 30] [--scheme g128|c] [--paths]
//              [--only wg128,t64] [--splits 0,1,2,4]
//   --paths: every path, kAuto first; --only: these paths (w4a8_path_name) instead of kAuto; --splits: each forced
//   split count, 0 = automatic, for every path timed
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "bench_timer.cuh"
#include "gemm/cublaslt.h"
#include "qdec/gemm.h"
#include "qdec/w4a8_gemm.h"
#include "qdec/weight_formats.h"

using namespace qdec;
using qdec::bench::BenchError;

namespace {

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b = 0) : bytes(b) {
    if (b) BENCH_CUDA(cudaMalloc(&p, b));
  }
  ~Buf() {
    if (p) cudaFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};
void rnd(const Buf& b, uint64_t seed) {
  bench::fill_random_words<<<1024, 256>>>(b.as<uint32_t>(), b.bytes / 4, seed);
  BENCH_CUDA(cudaGetLastError());
}
void word(void* p, size_t bytes, uint32_t v) {
  bench::fill_same_word<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, v);
  BENCH_CUDA(cudaGetLastError());
}

// cuBLASLt int8 x int8 -> int32 (the TN layout IMMA kernels need): D^T[N, M] = W[N, K] . X[M, K]^T.
struct LtInt8 {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  Buf ws{size_t(32) << 20};
  LtInt8(int m, int n, int k) {
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatrixLayoutCreate(&a, CUDA_R_8I, k, n, k);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_8I, k, m, k);
    cublasLtMatrixLayoutCreate(&d, CUDA_R_32I, n, m, n);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t wsb = ws.bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    ok = cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, d, d, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS &&
         found > 0;
    algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  }
  ~LtInt8() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (h) cublasLtDestroy(h);
  }
  void run(const void* w, const void* x, void* y) {
    const int32_t alpha = 1, beta = 0;
    if (cublasLtMatmul(h, desc, &alpha, w, a, x, b, &beta, y, d, y, d, &algo, ws.p, ws.bytes, nullptr) !=
        CUBLAS_STATUS_SUCCESS)
      throw BenchError("cublasLtMatmul int8 failed");
  }
};

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  for (const auto& it : bench::split_list(s, ',')) v.push_back(std::stoi(it));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string shapes_s = "4096x4096,28672x4096,4096x14336,8192x8192", m_s = "1,4,16,32,64,128,256,1024,4096",
                splits_s = "0";
    int iters = 30;
    bool channel = false, paths = false;
    std::string only_s;  // --only: these paths instead of kAuto (names as w4a8_path_name)
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw BenchError(a + " needs a value");
        return argv[++i];
      };
      if (a == "--shapes") {
        shapes_s = next();
      } else if (a == "--m") {
        m_s = next();
      } else if (a == "--iters") {
        iters = std::stoi(next());
      } else if (a == "--scheme") {
        channel = next() == "c";
      } else if (a == "--paths") {
        paths = true;
      } else if (a == "--only") {
        only_s = next();
      } else if (a == "--splits") {
        splits_s = next();
      } else {
        throw BenchError("unknown option " + a);
      }
    }
    if (shapes_s == "all") shapes_s = "4096x4096,6144x4096,28672x4096,4096x14336,8192x8192,1280x8192,8192x3584";
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
    bench::Timer timer(nullptr, iters);  // the legacy default stream, as the probe's launches

    // Read ceiling (2 GiB streaming read) and launch floor, this run.
    double ceiling_gbs = 0, floor_us = 0;
    {
      Buf big(size_t(2) << 30), sink(16);
      rnd(big, 1);
      const uint64_t n16 = big.bytes / 16;
      const double us = timer.time(2, iters, [&](int) {
        bench::read_stream_kernel<<<prop.multiProcessorCount * 4, 512>>>(big.as<uint4>(), n16, sink.as<uint32_t>());
      });
      ceiling_gbs = big.bytes / us / 1e3;
      floor_us = timer.time(5, iters, [&](int) { bench::empty_kernel<<<1, 1>>>(); });
    }
    std::printf(
        "w4a8_probe on %s (%d SMs, %.0f MB L2), scheme %s, %d iterations (median); read ceiling %.0f GB/s, "
        "launch floor %.2f us\n",
        prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, channel ? "qoq-c" : "qoq-g128", iters, ceiling_gbs,
        floor_us);
    std::printf("%-11s %5s | %8s %-9s %7s %6s | %8s %8s %8s | %7s %7s %7s\n", "NxK", "M", "w4a8 us", "path", "W GB/s",
                "%ceil", "i8lt us", "w4a16 us", "bf16 us", "x i8lt", "x w4a16", "x bf16");
    const std::vector<int> ms = parse_ints(m_s);
    const std::vector<int> split_list = parse_ints(splits_s);
    const int gs = channel ? 0 : 128;
    for (const auto& sh : bench::split_list(shapes_s, ',')) {
      const size_t xpos = sh.find('x');
      const int n = std::stoi(sh.substr(0, xpos)), k = std::stoi(sh.substr(xpos + 1));
      const int mmax = *std::max_element(ms.begin(), ms.end());
      // Per rotation set: W4A8 packed, int8 W, int4-g128 W, bf16 W; X int8 / bf16; Y.
      const size_t w4a8_bytes = [&] {
        // total_bytes of the packed layout without packing anything: n_pad * k / 2 + meta + scales (+ zeros).
        const size_t nb = (n + 15) / 16, npad = nb * 16;
        auto a16 = [](size_t v) { return (v + 15) / 16 * 16; };
        const size_t meta = gs ? nb * (k / gs) * 32 : 0;
        const size_t sc = a16(nb * (k / 64) * 512 + meta);
        const size_t z = a16(sc + npad * 2);
        return a16(z + (gs ? 0 : npad));
      }();
      WeightLayout wl{WeightFormat{WeightKind::kINT4, 128}, n, k};
      const size_t set_bytes = w4a8_bytes + size_t(n) * k * 3 + wl.code_bytes() + wl.meta_bytes() +
                               size_t(mmax) * k * 3 + size_t(mmax) * n * 4;
      const int sets = int(std::clamp<size_t>((size_t(4) * prop.l2CacheSize) / set_bytes + 2, 2, 16));
      std::vector<std::unique_ptr<Buf>> w4, w8, wi4, wqm, wbf, xq, xbf, y;
      for (int s = 0; s < sets; ++s) {
        w4.push_back(std::make_unique<Buf>(w4a8_bytes));
        w8.push_back(std::make_unique<Buf>(size_t(n) * k));
        wi4.push_back(std::make_unique<Buf>(wl.code_bytes()));
        wqm.push_back(std::make_unique<Buf>(wl.meta_bytes()));
        wbf.push_back(std::make_unique<Buf>(size_t(n) * k * 2));
        xq.push_back(std::make_unique<Buf>(size_t(mmax) * k));
        xbf.push_back(std::make_unique<Buf>(size_t(mmax) * k * 2));
        y.push_back(std::make_unique<Buf>(size_t(mmax) * n * 4));
        rnd(*w4[s], 10 + s);
        rnd(*w8[s], 20 + s);
        rnd(*wi4[s], 30 + s);
        word(wqm[s]->p, wqm[s]->bytes, 0x2C002C00u);  // fp16 scale and offset 0.0625
        word(wbf[s]->p, wbf[s]->bytes, 0x3C003C00u);
        rnd(*xq[s], 40 + s);
        word(xbf[s]->p, xbf[s]->bytes, 0x3F803F80u);
        if (gs) {  // valid group meta: s1 = 16, z * s1 = 112 everywhere (any byte pattern times the same)
          const size_t meta_off = size_t((n + 15) / 16) * (k / 64) * 512;
          word(w4[s]->as<uint8_t>() + meta_off, size_t((n + 15) / 16) * (k / gs) * 32, 0x70107010u);
        }
      }
      Buf sx(size_t(mmax) * 4), rs(size_t(mmax) * 4);
      word(sx.p, sx.bytes, 0x3C000000u);
      word(rs.p, rs.bytes, 0);
      BENCH_CUDA(cudaDeviceSynchronize());
      for (int m : ms) {
        W4A8Params p;
        p.x = {m, k, xq[0]->as<int8_t>(), 0, sx.as<float>(), rs.as<int32_t>()};
        p.w = {n, k, gs, w4[0]->p, w4a8_bytes};
        p.y = y[0]->p;
        size_t ws_bytes = 0;
        bench::check_status(w4a8_gemm_workspace_bytes(p, &ws_bytes), "w4a8 workspace");
        // Forced paths need their own workspace sizes: take the largest over the paths timed.
        std::vector<W4A8Path> path_list = {W4A8Path::kAuto};
        if (paths) path_list.assign(std::begin(kW4A8Paths), std::end(kW4A8Paths));
        if (!only_s.empty()) {
          path_list.clear();
          for (W4A8Path q : kW4A8Paths)
            if (("," + only_s + ",").find("," + std::string(w4a8_path_name(q)) + ",") != std::string::npos)
              path_list.push_back(q);
          if (path_list.empty()) throw BenchError("--only " + only_s + ": no such path");
        }
        for (W4A8Path pa : path_list)
          for (int sp : split_list) {
            W4A8Params q = p;
            q.path = pa;
            q.num_splits = sp;
            size_t b = 0;
            bench::check_status(w4a8_gemm_workspace_bytes(q, &b), "w4a8 workspace");
            ws_bytes = std::max(ws_bytes, b);
          }
        Buf ws(ws_bytes);
        if (ws_bytes) BENCH_CUDA(cudaMemset(ws.p, 0, ws_bytes));
        p.workspace = ws.p;
        p.workspace_bytes = ws_bytes;
        // Peers.
        LtInt8 lt(m, n, k);
        const double t_i8 = lt.ok ? timer.time(3, iters,
                                               [&](int i) {
                                                 const int s = i % sets;
                                                 lt.run(w8[s]->p, xq[s]->p, y[s]->p);
                                               })
                                  : -1;
        GemmParams g;
        g.m = m;
        g.x = xbf[0]->p;
        g.w = WeightView{wl, wi4[0]->p, wqm[0]->p};
        g.y = y[0]->p;
        size_t gws = 0;
        bench::check_status(gemm_workspace_bytes(g, &gws), "w4a16 workspace");
        Buf gw(gws);
        if (gws) BENCH_CUDA(cudaMemset(gw.p, 0, gws));
        g.workspace = gw.p;
        g.workspace_bytes = gws;
        const double t_w4a16 = timer.time(3, iters, [&](int i) {
          const int s = i % sets;
          GemmParams q = g;
          q.x = xbf[s]->p;
          q.w.codes = wi4[s]->p;
          q.w.meta = wqm[s]->p;
          q.y = y[s]->p;
          bench::check_status(gemm(q, nullptr), "w4a16");
        });
        Buf lt_ws(wq::kCublasWorkspaceBytes);
        const double t_bf16 = timer.time(3, iters, [&](int i) {
          const int s = i % sets;
          bench::check_status(
              wq::cublaslt_gemm(true, 0, m, n, k, xbf[s]->p, k, wbf[s]->p, y[s]->p, n, lt_ws.p, lt_ws.bytes, nullptr),
              "bf16");
        });
        for (W4A8Path pa : path_list)
          for (int sp : split_list) {
            W4A8Params q0 = p;
            q0.path = pa;
            q0.num_splits = sp;
            W4A8Path used;
            int splits = 0;
            bench::check_status(w4a8_gemm_plan(q0, &used, &splits), "w4a8 plan");
            const double t = timer.time(3, iters, [&](int i) {
              const int s = i % sets;
              W4A8Params q = q0;
              q.x.q = xq[s]->as<int8_t>();
              q.w.data = w4[s]->p;
              q.y = y[s]->p;
              bench::check_status(w4a8_gemm(q, nullptr), "w4a8");
            });
            const double wgbs = w4a8_bytes / t / 1e3;
            const double moved = w4a8_bytes + double(m) * k + double(m) * n * 2;
            char pname[32];
            std::snprintf(pname, sizeof(pname), "%s%s s%d", pa == W4A8Path::kAuto ? "*" : "", w4a8_path_name(used),
                          splits);
            std::printf("%-11s %5d | %8.1f %-9s %7.0f %5.0f%% | %8.1f %8.1f %8.1f | %6.2fx %6.2fx %6.2fx\n", sh.c_str(),
                        m, t, pname, wgbs, 100.0 * moved / t / 1e3 / ceiling_gbs, t_i8, t_w4a16, t_bf16, t_i8 / t,
                        t_w4a16 / t, t_bf16 / t);
          }
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "w4a8_probe: %s\n", e.what());
    return 1;
  }
}
