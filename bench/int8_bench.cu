// INT8 tensor-core benchmark (see int8_bench.h; columns in docs/int8_gemm.md).
//
// How a case is measured (the method of bench/gemm_bench.cu):
//   - Inputs are random, never zeros: a hash-of-index kernel fills 16-bit values in [-1, 1), int8 codes with
//     random bytes and scales with small positive values.
//   - Inputs are rotated: enough independent weight sets that together they exceed 4x L2, so each launch streams
//     its weights from DRAM.
//   - A spin kernel holds the stream while the host enqueues all timed launches, each between its own pair of CUDA
//     events, so host launch cost never shows as GPU time; the median is reported, with the SM clock read by a
//     probe kernel right after the batch.
//   - Bytes: weights (+ their scales) read, X read, Y written. GB/s is 10^9 bytes/s; "% ceil" the share of a
//     read-only streaming kernel's bandwidth measured at the start of the same run (the RMSNorm table also gives
//     the share of a copy kernel's, read + write, since that kernel writes a third of its bytes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__NVCC__) && !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.cuh"
#include "bench_timer.cuh"
#include "gemm/cublaslt.h"
#include "int8_bench.h"
#include "int8gemm/w8a8_cublaslt.h"
#include "qdec/act_quant.h"
#include "qdec/gemm.h"
#include "qdec/int8_quant.h"
#include "qdec/w4a8_gemm.h"
#include "qdec/w8a8_gemm.h"
#include "qdec/weight_formats.h"

namespace qdec::bench {
namespace {

using json = nlohmann::json;

// kind 0: bf16 pairs in [-1, 1); 1: raw bits; 2: fp32 in [1e-4, 2e-4) (scales); 3: int4 meta (fp16 scale, fp16
// offset); 4: small int32 (block sums).
__global__ void fill_kernel(uint32_t* buf, uint64_t n_words, int kind, uint64_t seed) {
  for (uint64_t w = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; w < n_words;
       w += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(w ^ seed);
    const uint32_t r0 = uint32_t(h), r1 = uint32_t(h >> 32);
    uint32_t out = r0;
    if (kind == 0) {
      out = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(2.f * unit_float(r0) - 1.f))) |
            (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(2.f * unit_float(r1) - 1.f))) << 16);
    } else if (kind == 2) {
      out = __float_as_uint(1e-4f + 1e-4f * unit_float(r0));
    } else if (kind == 3) {
      out = uint32_t(__half_as_ushort(__float2half_rn(0.001f + 0.001f * unit_float(r0)))) |
            (uint32_t(__half_as_ushort(__float2half_rn(0.02f * unit_float(r1) - 0.01f))) << 16);
    } else if (kind == 4) {
      out = uint32_t(int(r0 % 2001) - 1000);
    }
    buf[w] = out;
  }
}

void fill(const Buf& b, int kind, uint64_t seed, cudaStream_t s) {
  const uint64_t words = b.bytes() / 4;
  if (!words) return;
  fill_kernel<<<unsigned(std::min<uint64_t>((words + 255) / 256, 4096)), 256, 0, s>>>(b.as<uint32_t>(), words, kind,
                                                                                      mix64(seed));
  BENCH_CUDA(cudaGetLastError());
}

// The copy ceiling: read and write streams of the same size (both counted).
__global__ void __launch_bounds__(512)
    copy_stream_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t n) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = __ldcs(src + i);
}

// The quantizer's traffic without its arithmetic: each 16-byte piece of X read once, 8 bytes written in its place
// (bf16 in, int8 out). The RMSNorm table's "copy bound" row: what a kernel moving those bytes reaches at that size.
__global__ void __launch_bounds__(512)
    narrow_copy_kernel(const uint4* __restrict__ src, uint2* __restrict__ dst, uint64_t n) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint4 v = __ldcs(src + i);
    dst[i] = make_uint2(v.x ^ v.y, v.z ^ v.w);
  }
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
    if (out.back().n < 1 || out.back().k < 16 || out.back().k % 128 != 0)
      throw BenchError("--shapes: '" + it + "' needs N >= 1 and K a multiple of 128");
  }
  return out;
}

// Random QoQ weights of the given shape (codes and scales from a cheap generator: only their size matters to the
// timing), prepacked by the library. group_size 0: per channel.
Status random_w4a8(int n, int k, int group_size, uint64_t seed, W4A8Packed* out) {
  uint64_t st = seed;
  auto next = [&st] { return st = mix64(st); };
  if (group_size > 0) {
    QoQGroupWeights w;
    w.n = n;
    w.k = k;
    w.group_size = group_size;
    const int g = k / group_size;
    w.codes.resize(size_t(n) * k / 2);
    for (size_t i = 0; i < w.codes.size(); i += 8) {
      const uint64_t r = next();
      for (size_t j = 0; j < 8 && i + j < w.codes.size(); ++j) w.codes[i + j] = uint8_t(r >> (8 * j));
    }
    w.group_scales.resize(size_t(n) * g);
    // s1 <= 7 keeps (q - z) * s1 within the protective range [-119, 119] for any codes and zeros.
    for (auto& v : w.group_scales) v = uint8_t(1 + next() % 7);
    w.group_zeros.resize(size_t(n) * ((g + 1) / 2));
    for (auto& v : w.group_zeros) v = uint8_t(next());
    w.channel_scales.assign(n, 0x1400);  // fp16 ~0.001
    return w4a8_prepack(w, out);
  }
  QoQChannelWeights w;
  w.n = n;
  w.k = k;
  w.codes.resize(size_t(n) * k / 2);
  for (size_t i = 0; i < w.codes.size(); i += 8) {
    const uint64_t r = next();
    for (size_t j = 0; j < 8 && i + j < w.codes.size(); ++j) w.codes[i + j] = uint8_t(r >> (8 * j));
  }
  w.scales.assign(n, 0x1400);
  w.zeros.resize(n);
  for (auto& v : w.zeros) v = uint8_t(next() % 16);
  return w4a8_prepack(w, out);
}

}  // namespace

int run_int8_bench(const Int8BenchOptions& o, std::ostream& out) {
  try {
    // Options checked before any GPU work, so that a bad value fails the run with or without a GPU.
    for (int sp : o.w4a8_splits)
      if (sp < 1) throw BenchError(fmt::format("--w4a8-splits: split count {} is not >= 1", sp));
    for (int sp : o.w8a8_splits)
      if (sp < 0) throw BenchError(fmt::format("--w8a8-splits: split count {} is not >= 0 (0: the planner's)", sp));
    if (!(o.warm_ms >= 0)) throw BenchError(fmt::format("--warm-ms: {} must be >= 0", o.warm_ms));
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      std::cerr << "bench int8: no CUDA device\n";
      return 2;
    }
    BENCH_CUDA(cudaSetDevice(o.device));
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, o.device));
    if (o.iters < 1 || o.iters > 1000) throw BenchError("--iters must be in 1..1000");
    if (o.block != 32 && o.block != 64 && o.block != 128) throw BenchError("--block must be 32, 64 or 128");
    const std::vector<int> ms = o.m.empty() ? std::vector<int>{1, 4, 16, 64, 256, 1024, 4096} : o.m;
    for (int m : ms)
      if (m < 1 || m > 65536) throw BenchError(fmt::format("--m {} is outside 1..65536", m));
    const std::vector<ShapeNK> shapes = parse_shapes(o.shapes);
    std::vector<W4A8Path> w4a8_paths;
    for (const std::string& name : o.w4a8_paths) {
      bool found = false;
      for (W4A8Path q : kW4A8Paths)
        if (name == w4a8_path_name(q)) {
          w4a8_paths.push_back(q);
          found = true;
        }
      if (!found) throw BenchError(fmt::format("--w4a8-paths: unknown path '{}'", name));
    }

    cudaStream_t stream;
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Timer timer(stream, std::max(o.iters, 20));
    json j;
    j["device"] = {{"name", prop.name},
                   {"sm_count", prop.multiProcessorCount},
                   {"l2_bytes", prop.l2CacheSize},
                   {"cc", fmt::format("{}.{}", prop.major, prop.minor)}};
    out << fmt::format("qdec bench int8 on {} ({} SMs, {:.0f} MB L2), {} iterations (median)\n", prop.name,
                       prop.multiProcessorCount, prop.l2CacheSize / 1e6, o.iters);

    // Ceilings: a streaming read of 2 GiB, a copy of 1 GiB (read + write counted), the launch floor.
    double read_gbps = 0, copy_gbps = 0;
    {
      const size_t bytes = size_t(2) << 30;
      Buf buf(bytes), sink(16);
      fill(buf, 1, 1, stream);
      const int blocks = full_grid_blocks(read_stream_kernel, 512, prop.multiProcessorCount);
      double us = timer.time(3, std::min(o.iters, 20), [&](int) {
        read_stream_kernel<<<blocks, 512, 0, stream>>>(buf.as<const uint4>(), bytes / 16, sink.as<uint32_t>());
      });
      BENCH_CUDA(cudaGetLastError());
      read_gbps = bytes / (us * 1e-6) / 1e9;
      us = timer.time(3, std::min(o.iters, 20), [&](int) {
        copy_stream_kernel<<<blocks, 512, 0, stream>>>(buf.as<const uint4>(), buf.as<uint4>() + bytes / 32, bytes / 32);
      });
      BENCH_CUDA(cudaGetLastError());
      copy_gbps = bytes / (us * 1e-6) / 1e9;
      const double floor_us = timer.time(3, o.iters, [&](int) { empty_kernel<<<1, 32, 0, stream>>>(); });
      BENCH_CUDA(cudaGetLastError());
      j["read_ceiling_gbps"] = read_gbps;
      j["copy_ceiling_gbps"] = copy_gbps;
      j["launch_floor_us"] = floor_us;
      out << fmt::format(
          "read ceiling: {:.0f} GB/s (streaming read of 2 GiB); copy ceiling: {:.0f} GB/s (1 GiB read + 1 GiB "
          "written); launch floor: {:.2f} us\n",
          read_gbps, copy_gbps, floor_us);
    }
    // The ceilings above are timed as before; the cases below after their idle (cool_ms_for) and --warm-ms.
    timer.set_warm_ms(o.warm_ms);
    j["warm_ms"] = o.warm_ms;
    j["cool_ms"] = o.cool_ms;
    out << fmt::format("cases: {}; {} ms of each case before its timed batch\n", cool_ms_note(o.cool_ms), o.warm_ms);

    json cases = json::array();
    if (o.gemm) {
      WeightFormat w4f;
      check_status(parse_weight_format("int4-g128", &w4f), "int4-g128");
      bool w4a8_live = false;
      std::string w4a8_why;
      if (o.w4a8) {
        // One small call tells whether the W4A8 kernel exists yet (the placeholder answers Unsupported).
        W4A8Packed pk;
        const Status pst = random_w4a8(128, 256, 128, 1, &pk);
        Buf d(pk.data.size()), xq(16 * 256), xs(64), xr(64), y(16 * 128 * 2);
        BENCH_CUDA(cudaMemcpy(d.get(), pk.data.data(), pk.data.size(), cudaMemcpyHostToDevice));
        BENCH_CUDA(cudaMemset(xs.get(), 0, 64));
        BENCH_CUDA(cudaMemset(xr.get(), 0, 64));
        W4A8Params p;
        p.x = Int8ActivationsView{16, 256, xq.as<int8_t>(), 0, xs.as<float>(), xr.as<int32_t>()};
        p.w = W4A8WeightView{128, 256, 128, d.get(), pk.data.size()};
        p.y = y.get();
        size_t wsb = 0;
        const Status ws_status = pst.ok() ? w4a8_gemm_workspace_bytes(p, &wsb) : pst;
        Buf ws(wsb);
        if (ws_status.ok() && wsb) BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
        p.workspace = ws.get();
        p.workspace_bytes = wsb;
        const Status s = ws_status.ok() ? w4a8_gemm(p, stream) : ws_status;
        BENCH_CUDA(cudaStreamSynchronize(stream));
        w4a8_live = s.ok();
        w4a8_why = s.ok() ? "" : std::string(status_code_name(s.code()));
        if (!s.ok()) out << "W4A8 rows: " << s.to_string() << "\n";
      }

      out << fmt::format("\n{:>11} {:>5} {:>16} {:>9} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>17} {:>6}\n", "NxK", "M",
                         "kernel", "us", "TOPS", "GB/s", "% ceil", "x bf16", "x i8-lt", "x w4a16", "path", "MHz");
      for (const ShapeNK& sh : shapes) {
        const int max_m = *std::max_element(ms.begin(), ms.end());
        const size_t bf16_w = size_t(sh.n) * sh.k * 2, i8_w = size_t(sh.n) * sh.k;
        const int sets = int(std::clamp<size_t>(4 * size_t(prop.l2CacheSize) / bf16_w + 1, 2, 8));
        const int isets = int(std::clamp<size_t>(4 * size_t(prop.l2CacheSize) / i8_w + 1, 2, 16));
        // X (bf16 and int8 with its scales / sums), Y: one per rotation set.
        std::vector<Buf> wb, xb, yb, wq, xq;
        for (int i = 0; i < sets; ++i) {
          wb.emplace_back(bf16_w);
          xb.emplace_back(size_t(max_m) * sh.k * 2);
          yb.emplace_back(size_t(max_m) * sh.n * 4);
          fill(wb.back(), 0, 100 + i, stream);
          fill(xb.back(), 0, 200 + i, stream);
        }
        for (int i = 0; i < isets; ++i) {
          wq.emplace_back(i8_w);
          fill(wq.back(), 1, 300 + i, stream);
        }
        for (int i = 0; i < sets; ++i) {
          xq.emplace_back(size_t(max_m) * sh.k);
          fill(xq.back(), 1, 400 + i, stream);
        }
        Buf sx(size_t(max_m) * 4), sw(size_t(sh.n) * 4), rs(size_t(max_m) * 4);
        fill(sx, 2, 5, stream);
        fill(sw, 2, 6, stream);
        fill(rs, 4, 7, stream);
        const int nb = sh.k / o.block;
        Buf bsa(size_t(max_m) * nb * 4), boa(bsa.bytes()), bma(bsa.bytes()), bsb(size_t(sh.n) * nb * 4),
            bob(bsb.bytes()), bmb(bsb.bytes());
        fill(bsa, 2, 8, stream), fill(boa, 2, 9, stream), fill(bma, 4, 10, stream);
        fill(bsb, 2, 11, stream), fill(bob, 2, 12, stream), fill(bmb, 4, 13, stream);
        // W4A16 packed weights (int4-g128) for qdec::gemm.
        const WeightLayout L4{w4f, sh.n, sh.k};
        const int w4sets =
            int(std::clamp<size_t>(4 * size_t(prop.l2CacheSize) / (L4.code_bytes() + L4.meta_bytes()) + 1, 2, 16));
        std::vector<Buf> w4c, w4m;
        for (int i = 0; i < w4sets; ++i) {
          w4c.emplace_back(L4.code_bytes());
          w4m.emplace_back(L4.meta_bytes());
          fill(w4c.back(), 1, 500 + i, stream);
          fill(w4m.back(), 3, 600 + i, stream);
        }
        // W4A8 weights, both schemes (prepacked once, copied into rotation sets).
        struct W4A8Set {
          int group;
          size_t bytes = 0;
          std::vector<Buf> d;
          Status prepack;
        };
        std::vector<W4A8Set> w4a8;
        if (w4a8_live) {
          for (int group : {128, 0}) {
            W4A8Packed pk;
            W4A8Set s{group, 0, {}, random_w4a8(sh.n, sh.k, group, 700 + group, &pk)};
            s.bytes = pk.data.size();
            const int n_sets =
                int(std::clamp<size_t>(4 * size_t(prop.l2CacheSize) / std::max<size_t>(pk.data.size(), 1) + 1, 2, 16));
            for (int i = 0; i < n_sets && s.prepack.ok(); ++i) {
              s.d.emplace_back(pk.data.size());
              BENCH_CUDA(cudaMemcpy(s.d.back().get(), pk.data.data(), pk.data.size(), cudaMemcpyHostToDevice));
            }
            w4a8.push_back(std::move(s));
          }
        }
        Buf lt_ws(wq::kCublasWorkspaceBytes), i8_d(size_t(max_m) * ((sh.n + 3) / 4 * 4) * 4),
            i8_ws(w8a8::kLtWorkspaceBytes);
        BENCH_CUDA(cudaStreamSynchronize(stream));

        for (int m : ms) {
          timer.set_cool_ms(cool_ms_for(o.cool_ms, m));
          const double flops = 2.0 * m * double(sh.n) * sh.k;
          const std::string nk = fmt::format("{}x{}", sh.n, sh.k);
          struct Row {
            std::string name, path;
            double us = 0, bytes = 0, mhz = 0;
            std::string status;  // empty: timed
          };
          std::vector<Row> rows;
          auto timed = [&](const std::string& name, const std::string& path, double bytes, auto&& launch) {
            Row r{name, path};
            r.us = timer.time(o.warmup, o.iters, launch);
            r.mhz = timer.last_sm_mhz();
            BENCH_CUDA(cudaGetLastError());
            r.bytes = bytes;
            rows.push_back(r);
          };
          const double y16 = double(m) * sh.n * 2;
          // cuBLASLt BF16 (the 1.0x column).
          timed("cublas-bf16", "cublaslt", double(bf16_w) + double(m) * sh.k * 2 + y16, [&](int i) {
            const int s = i % sets;
            check_status(wq::cublaslt_gemm(true, 0, m, sh.n, sh.k, xb[s].get(), sh.k, wb[s].get(), yb[s].get(), sh.n,
                                           lt_ws.get(), lt_ws.bytes(), stream),
                         "cuBLASLt bf16");
          });
          // cuBLASLt INT8, raw: int32 out, no scales.
          timed("cublaslt-int8", "s8s8->s32", double(i8_w) + double(m) * sh.k + double(m) * sh.n * 4, [&](int i) {
            check_status(
                w8a8::cublaslt_s8_gemm(m, sh.n, sh.k, xq[i % sets].as<int8_t>(), sh.k, wq[i % isets].as<int8_t>(), sh.k,
                                       i8_d.as<int32_t>(), (sh.n + 3) / 4 * 4, i8_ws.get(), i8_ws.bytes(), stream),
                "cuBLASLt int8");
          });
          // qdec W4A16 (int4-g128), automatic path.
          {
            GemmParams p;
            p.m = m;
            p.w = WeightView{L4, w4c[0].get(), w4m[0].get()};
            p.x = xb[0].get();
            p.y = yb[0].get();
            size_t wsb = 0;
            check_status(gemm_workspace_bytes(p, &wsb), "w4a16 workspace");
            GemmPath used;
            int splits = 0;
            check_status(gemm_plan(p, &used, &splits), "w4a16 plan");
            Buf ws(wsb);
            if (wsb) BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
            p.workspace = ws.get();
            p.workspace_bytes = wsb;
            timed("qdec-w4a16", gemm_path_name(used),
                  double(L4.code_bytes() + L4.meta_bytes()) + double(m) * sh.k * 2 + y16, [&](int i) {
                    p.w.codes = w4c[i % w4sets].get();
                    p.w.meta = w4m[i % w4sets].get();
                    p.x = xb[i % sets].get();
                    p.y = yb[i % sets].get();
                    check_status(gemm(p, stream), "w4a16 gemm");
                  });
          }
          // qdec W8A8 per channel: each backend ('*' = the one kAuto takes).
          const double w8_bytes = double(i8_w) + 4.0 * sh.n + double(m) * sh.k + 4.0 * m + y16;
          // (backend, forced split count): the wgmma backend once per --w8a8-splits value (0 = the planner's).
          std::vector<std::pair<W8A8Backend, int>> w8_runs{{W8A8Backend::kMma, 0}, {W8A8Backend::kCublasLt, 0}};
          for (int sp : o.w8a8_splits.empty() ? std::vector<int>{0} : o.w8a8_splits)
            w8_runs.emplace_back(W8A8Backend::kWgmma, sp);
          for (const auto& [b, forced_splits] : w8_runs) {
            if (!o.w8a8 || (b == W8A8Backend::kMma && m > o.mma_max_m)) continue;
            W8A8Params p;
            p.num_splits = forced_splits;
            p.x = Int8ActivationsView{m, sh.k, xq[0].as<int8_t>(), 0, sx.as<float>(), rs.as<int32_t>()};
            p.w = Int8WeightView{sh.n, sh.k, wq[0].as<int8_t>(), 0, sw.as<float>()};
            p.y = yb[0].get();
            p.backend = b;
            if (b == W8A8Backend::kWgmma) {  // sm_90a only: elsewhere the row says why it is missing
              W8A8Backend u;
              int sp = 0;
              const Status st = w8a8_plan(p, &u, &sp);
              if (!st.ok()) {
                out << fmt::format("  qdec-w8a8 wgmma: {}\n", st.to_string());
                continue;
              }
            }
            size_t wsb = 0;
            check_status(w8a8_gemm_workspace_bytes(p, &wsb), "w8a8 workspace");
            W8A8Backend used, autob;
            int splits = 0, auto_splits = 0;
            const char* wg_kernel = "";
            check_status(w8a8_plan(p, &used, &splits, &wg_kernel), "w8a8 plan");
            W8A8Params pa = p;
            pa.backend = W8A8Backend::kAuto;
            pa.num_splits = 0;
            const char* auto_kernel = "";
            check_status(w8a8_plan(pa, &autob, &auto_splits, &auto_kernel), "w8a8 auto plan");
            Buf ws(wsb);
            if (wsb) BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
            p.workspace = ws.get();
            p.workspace_bytes = wsb;
            const std::string path =
                (used == W8A8Backend::kMma     ? fmt::format("mma s{}", splits)
                 : used == W8A8Backend::kWgmma ? fmt::format("wgmma{} s{}",
                                                             std::string(wg_kernel) == "cooperative"     ? "-coop"
                                                             : std::string(wg_kernel) == "pingpong-n160" ? "-n160"
                                                                                                         : "",
                                                             splits)
                                               : std::string("cublaslt+epi")) +
                std::string(autob == used && auto_splits == splits && std::string(auto_kernel) == wg_kernel ? "*" : "");
            timed("qdec-w8a8", path, w8_bytes, [&](int i) {
              p.x.q = xq[i % sets].as<int8_t>();
              p.w.q = wq[i % isets].as<int8_t>();
              p.y = yb[i % sets].get();
              check_status(w8a8_gemm(p, stream), "w8a8 gemm");
            });
          }
          // qdec W8A8 per K-block (seed 003).
          if (o.w8a8) {
            W8A8BlockParams p;
            p.a = Int8BlockView{
                m, sh.k, o.block, xq[0].as<int8_t>(), 0, bsa.as<float>(), boa.as<float>(), bma.as<int32_t>()};
            p.b = Int8BlockView{
                sh.n, sh.k, o.block, wq[0].as<int8_t>(), 0, bsb.as<float>(), bob.as<float>(), bmb.as<int32_t>()};
            p.y = yb[0].get();
            const double bytes = double(i8_w) + 12.0 * sh.n * nb + double(m) * sh.k + 12.0 * m * nb + y16;
            timed(fmt::format("qdec-w8a8-b{}", o.block), "mma", bytes, [&](int i) {
              p.a.q = xq[i % sets].as<int8_t>();
              p.b.q = wq[i % isets].as<int8_t>();
              p.y = yb[i % sets].get();
              check_status(w8a8_block_gemm(p, stream), "w8a8 block gemm");
            });
          }
          // qdec W4A8, group 128 and per channel.
          if (o.w4a8) {
            for (int group : {128, 0}) {
              const std::string name = group ? "qdec-w4a8-g128" : "qdec-w4a8-ch";
              if (!w4a8_live) {
                Row r{name, "-"};
                r.status = w4a8_why;
                rows.push_back(r);
                continue;
              }
              W4A8Set& s = w4a8[group ? 0 : 1];
              if (!s.prepack.ok()) {
                Row r{name, "-"};
                r.status = s.prepack.to_string();
                rows.push_back(r);
                continue;
              }
              W4A8Params p;
              p.x = Int8ActivationsView{m, sh.k, xq[0].as<int8_t>(), 0, sx.as<float>(), rs.as<int32_t>()};
              p.w = W4A8WeightView{sh.n, sh.k, group, s.d[0].get(), s.bytes};
              p.y = yb[0].get();
              W4A8Path auto_path = W4A8Path::kAuto;
              int auto_splits = 0;
              const Status auto_st = w4a8_gemm_plan(p, &auto_path, &auto_splits);
              std::string fail = auto_st.ok() ? "" : auto_st.to_string();
              // (path, forced split count): every requested path; forced paths once per --w4a8-splits value.
              std::vector<std::pair<W4A8Path, int>> runs;
              for (W4A8Path want : w4a8_paths) {
                if (want == W4A8Path::kAuto || o.w4a8_splits.empty()) {
                  runs.emplace_back(want, 0);
                } else {
                  for (int sp : o.w4a8_splits) runs.emplace_back(want, sp);
                }
              }
              for (size_t pi = 0; pi < runs.size() && fail.empty(); ++pi) {
                const W4A8Path want = runs[pi].first;
                // A forced path that is auto's pick is timed once (as auto, where auto is also requested).
                if (want == auto_path && runs[pi].second == 0 &&
                    std::find(w4a8_paths.begin(), w4a8_paths.end(), W4A8Path::kAuto) != w4a8_paths.end())
                  continue;
                p.path = want;
                p.num_splits = runs[pi].second;
                size_t wsb = 0;
                W4A8Path used;
                W8A8Backend w8b = W8A8Backend::kAuto;
                int splits = 0;
                const Status st = [&] {
                  QDEC_RETURN_IF_ERROR(w4a8_gemm_workspace_bytes(p, &wsb));
                  return w4a8_gemm_plan(p, &used, &splits, &w8b);
                }();
                if (!st.ok()) {
                  fail = st.to_string();
                  break;
                }
                Buf ws(wsb);
                if (wsb) BENCH_CUDA(cudaMemset(ws.get(), 0, wsb));
                p.workspace = ws.get();
                p.workspace_bytes = wsb;
                const std::string path =
                    (used == W4A8Path::kDequantW8A8 ? fmt::format("dq+{} s{}", w8a8_backend_name(w8b), splits)
                                                    : fmt::format("{} s{}", w4a8_path_name(used), splits)) +
                    std::string(used == auto_path && splits == auto_splits ? "*" : "");
                const int n_sets = int(s.d.size());
                timed(name, path, double(s.bytes) + double(m) * sh.k + 4.0 * m + y16, [&](int i) {
                  p.x.q = xq[i % sets].as<int8_t>();
                  p.w.data = s.d[i % n_sets].get();
                  p.y = yb[i % sets].get();
                  check_status(w4a8_gemm(p, stream), "w4a8 gemm");
                });
              }
              if (!fail.empty()) {
                Row r{name, "-"};
                r.status = fail;
                rows.push_back(r);
              }
            }
          }
          const double bf16_us = rows[0].us, i8_us = rows[1].us, w4_us = rows[2].us;
          for (const Row& r : rows) {
            if (!r.status.empty()) {
              out << fmt::format("{:>11} {:>5} {:>16} {:>9}\n", nk, m, r.name, r.status);
              cases.push_back({{"n", sh.n}, {"k", sh.k}, {"m", m}, {"kernel", r.name}, {"status", r.status}});
              continue;
            }
            const double gbps = r.bytes / (r.us * 1e-6) / 1e9;
            out << fmt::format(
                "{:>11} {:>5} {:>16} {:>9.2f} {:>7.1f} {:>8.0f} {:>6.1f}% {:>7.2f}x {:>7.2f}x "
                "{:>7.2f}x {:>17} {:>6.0f}\n",
                nk, m, r.name, r.us, flops / (r.us * 1e-6) / 1e12, gbps, 100.0 * gbps / read_gbps, bf16_us / r.us,
                i8_us / r.us, w4_us / r.us, r.path, r.mhz);
            cases.push_back({{"n", sh.n},
                             {"k", sh.k},
                             {"m", m},
                             {"kernel", r.name},
                             {"path", r.path},
                             {"us", r.us},
                             {"tops", flops / (r.us * 1e-6) / 1e12},
                             {"bytes", r.bytes},
                             {"gbps", gbps},
                             {"pct_read_ceiling", 100.0 * gbps / read_gbps},
                             {"x_cublas_bf16", bf16_us / r.us},
                             {"x_cublaslt_int8", i8_us / r.us},
                             {"x_qdec_w4a16", w4_us / r.us},
                             {"sm_mhz", r.mhz}});
          }
        }
      }
    }
    j["gemm"] = cases;

    if (o.rmsnorm) {
      const std::vector<int> rms_m = o.rms_m.empty() ? std::vector<int>{1, 16, 256, 1024, 4096} : o.rms_m;
      const std::vector<int> rms_k = o.rms_k.empty() ? std::vector<int>{2048, 4096, 8192, 14336} : o.rms_k;
      json rc = json::array();
      // The copy bound's grid: every SM full, or fewer blocks than that for a small X (below).
      const int copy_full_blocks =
          o.rms_bound ? full_grid_blocks(narrow_copy_kernel, 512, prop.multiProcessorCount) : 0;
      out << fmt::format("\n{:>5} {:>6} {:>16} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6}\n",
                         "M", "K", "kernel", "us", "GB/s", "% read", "% copy", "graph us", "GB/s", "% read", "% copy",
                         "pdl us", "% copy", "MHz");
      for (int k : rms_k) {
        for (int m : rms_m) {
          if (k < 1 || k > kActQuantMaxK || m < 1) throw BenchError(fmt::format("bad RMSNorm shape M {} K {}", m, k));
          timer.set_cool_ms(cool_ms_for(o.cool_ms, m));
          const long long ldq = (k + 15) / 16 * 16;
          const size_t xbytes = size_t(m) * k * 2;
          const int sets = int(std::clamp<size_t>(4 * size_t(prop.l2CacheSize) / xbytes + 1, 2, 64));
          std::vector<Buf> xs, qs;
          for (int i = 0; i < sets; ++i) {
            xs.emplace_back(xbytes);
            qs.emplace_back(size_t(m) * ldq);
            fill(xs.back(), 0, 800 + i, stream);
          }
          Buf w(size_t(k) * 2), sc(size_t(m) * 4), rs(size_t(m) * 4);
          fill(w, 0, 900, stream);
          const double bytes = double(xbytes) + double(m) * k + 2.0 * k + 8.0 * m;
          // One table row and its JSON case; pdl_us <= 0: no PDL timing (the copy bound's row).
          auto emit = [&](const char* name, double us, double g_us, double pdl_us, double b, double mhz) {
            const double gbps = b / (us * 1e-6) / 1e9, g_gbps = b / (g_us * 1e-6) / 1e9;
            const double pdl_gbps = pdl_us > 0 ? b / (pdl_us * 1e-6) / 1e9 : 0.0;
            out << fmt::format(
                       "{:>5} {:>6} {:>16} {:>9.2f} {:>8.0f} {:>8.1f}% {:>8.1f}% {:>9.2f} {:>8.0f} {:>8.1f}% "
                       "{:>8.1f}% ",
                       m, k, name, us, gbps, 100.0 * gbps / read_gbps, 100.0 * gbps / copy_gbps, g_us, g_gbps,
                       100.0 * g_gbps / read_gbps, 100.0 * g_gbps / copy_gbps)
                << (pdl_us > 0 ? fmt::format("{:>9.2f} {:>8.1f}% ", pdl_us, 100.0 * pdl_gbps / copy_gbps)
                               : fmt::format("{:>9} {:>9} ", "-", "-"))
                << fmt::format("{:>6.0f}\n", mhz);
            json row = {{"m", m},
                        {"k", k},
                        {"kernel", name},
                        {"us", us},
                        {"graph_us", g_us},
                        {"bytes", b},
                        {"gbps", gbps},
                        {"graph_gbps", g_gbps},
                        {"pct_read_ceiling", 100.0 * gbps / read_gbps},
                        {"pct_copy_ceiling", 100.0 * gbps / copy_gbps},
                        {"graph_pct_read_ceiling", 100.0 * g_gbps / read_gbps},
                        {"graph_pct_copy_ceiling", 100.0 * g_gbps / copy_gbps},
                        {"sm_mhz", mhz}};
            if (pdl_us > 0) {
              row["pdl_graph_us"] = pdl_us;
              row["pdl_graph_pct_read_ceiling"] = 100.0 * pdl_gbps / read_gbps;
              row["pdl_graph_pct_copy_ceiling"] = 100.0 * pdl_gbps / copy_gbps;
            }
            rc.push_back(std::move(row));
          };
          if (o.rms_bound) {
            // The same bytes moved by narrow_copy_kernel (X read, half of it written; rows packed, K % 8 == 0 only),
            // timed the same way: the "% copy" a quantizer of this size could reach under this timing.
            if (k % 8 == 0) {
              const uint64_t pieces = xbytes / 16;
              const int blocks = int(std::min<uint64_t>(copy_full_blocks, std::max<uint64_t>(1, (pieces + 511) / 512)));
              auto copy = [&](int i) {
                narrow_copy_kernel<<<blocks, 512, 0, stream>>>(xs[i % sets].as<const uint4>(), qs[i % sets].as<uint2>(),
                                                               pieces);
              };
              const double us = timer.time(o.warmup, o.iters, copy);
              const double g_us = timer.time_graph(std::max(sets, 8), o.iters, copy);
              const double mhz = timer.last_sm_mhz();
              BENCH_CUDA(cudaGetLastError());
              emit("copy bound", us, g_us, 0.0, double(xbytes) + double(xbytes) / 2, mhz);
            }
          }
          for (bool norm : {true, false}) {
            ActQuantParams p{
                m, k, GemmDType::kBF16, xs[0].get(), 0, qs[0].as<int8_t>(), ldq, sc.as<float>(), rs.as<int32_t>()};
            auto launch = [&](int i) {
              p.x = xs[i % sets].get();
              p.q = qs[i % sets].as<int8_t>();
              if (norm) {
                RmsNormQuantParams rp;
                rp.out = p;
                rp.weight = w.get();
                check_status(rmsnorm_quantize(rp, stream), "rmsnorm_quantize");
              } else {
                check_status(quantize_activations(p, stream), "quantize_activations");
              }
            };
            const double us = timer.time(o.warmup, o.iters, launch);
            // Back to back in a CUDA graph (as a model step issues it), one launch per rotated buffer set, at
            // least 8: no per-launch event pair, so the event-timing floor is not in it.
            const double g_us = timer.time_graph(std::max(sets, 8), o.iters, launch);
            // The same graph with every launch a programmatic dependent of the one before (ActQuantParams::pdl):
            // each call's start (and the RMSNorm weight staging) overlaps the previous call's tail.
            p.pdl = true;
            const double pdl_us = timer.time_graph(std::max(sets, 8), o.iters, launch);
            p.pdl = false;
            const double mhz = timer.last_sm_mhz();
            BENCH_CUDA(cudaGetLastError());
            const double b = norm ? bytes : bytes - 2.0 * k;
            emit(norm ? "rmsnorm+quant" : "quant", us, g_us, pdl_us, b, mhz);
          }
        }
      }
      j["rmsnorm_quant"] = rc;
    }
    BENCH_CUDA(cudaStreamDestroy(stream));
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path);
      f << j.dump(1) << "\n";
      if (!f) throw BenchError("cannot write " + o.json_path);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench int8: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace qdec::bench
