// Decode-attention benchmark (see attention_bench.h for what it covers, bench/README.md for the columns).
//
// How a case is measured:
//   - The cache is random, never zeros: a hash-of-index kernel fills K/V on the GPU, then the same kernel
//     makes every value valid for its format (finite 16-bit values, no fp8 NaN/Inf codes, small positive
//     scales in the meta regions of docs/formats.md), so no kernel can win on special values.
//   - Inputs are rotated: enough independent (K, V, Q, O) sets that together they exceed 2x L2, so each
//     launch reads its cache from DRAM, as a decode step does.
//   - Every timed launch sits between its own pair of CUDA events. A spin kernel holds the stream while the
//     host enqueues a batch of launches, so the host's launch cost never shows up as GPU idle time inside a
//     pair (nvbench's blocking kernel); the median and min of the per-launch times are reported.
//   - Bytes moved are the bytes the case must read and write (K and V rows of the live tokens, Q, O); GB/s
//     is 10^9 bytes per second, compared with a read-only streaming kernel measured in the same run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// fmt 9 turns constexpr off under nvcc yet keeps its consteval format-string checks, which then cannot be
// evaluated (and g++ rejects the half-constexpr header). nvcc 12+ handles fmt's constexpr code: turn it on.
#if defined(__NVCC__) && !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "attention/decode_timeline.h"
#include "attention_bench.h"
#include "bench_common.cuh"
#include "qdec/attention.h"
#include "qdec/formats.h"
#include "qdec/kv_cache.h"
#include "qdec/status.h"

namespace qdec::bench {
namespace {

using json = nlohmann::json;

// ---- Errors and RAII ------------------------------------------------------------------------------------

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) BENCH_CUDA(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Event {
 public:
  Event() { BENCH_CUDA(cudaEventCreate(&e_)); }
  ~Event() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class Stream {
 public:
  // Non-blocking: nothing on the legacy default stream (e.g. a synchronous copy elsewhere) serializes with
  // the timed launches.
  Stream() { BENCH_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

float elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.0f;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

// ---- Kernels ----------------------------------------------------------------------------------------------

enum class DataFill : int { kBF16, kFP16, kFP8E4M3, kFP8E5M2, kRawBits };
enum class MetaFill : int { kNone, kFP8Scale, kInt8Scales, kInt4ScaleShift };

// A buffer seen as tiles of 32-bit words: words [0, meta_word_offset) of each tile are data, the rest meta
// (docs/formats.md: tile = data region then meta region, both multiples of 16 bytes). Q and O are one tile
// with no meta.
struct FillSpec {
  uint64_t tile_words = 0;
  uint64_t meta_word_offset = 0;
  DataFill data = DataFill::kRawBits;
  MetaFill meta = MetaFill::kNone;
  float fp8_max = 448.0f;
  uint64_t seed_hash = 0;
};

__global__ void fill_kernel(uint32_t* __restrict__ buf, uint64_t n_words, FillSpec spec) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t w = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; w < n_words; w += stride) {
    const uint64_t h = mix64(w ^ spec.seed_hash);
    const uint32_t r0 = uint32_t(h);
    const uint32_t r1 = uint32_t(h >> 32);
    uint32_t out = r0;
    if (w % spec.tile_words < spec.meta_word_offset) {
      switch (spec.data) {
        case DataFill::kBF16:  // two values in [-1, 1)
          out = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(2.0f * unit_float(r0) - 1.0f))) |
                (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(2.0f * unit_float(r1) - 1.0f))) << 16);
          break;
        case DataFill::kFP16:
          out = uint32_t(__half_as_ushort(__float2half_rn(2.0f * unit_float(r0) - 1.0f))) |
                (uint32_t(__half_as_ushort(__float2half_rn(2.0f * unit_float(r1) - 1.0f))) << 16);
          break;
        case DataFill::kFP8E4M3:  // the only non-finite codes are S.1111.111: step them down to +-448
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (((out >> (8 * i)) & 0x7Fu) == 0x7Fu) out ^= 1u << (8 * i);
          }
          break;
        case DataFill::kFP8E5M2:  // exponent 11111 is Inf/NaN: clearing its top bit leaves a finite value
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (((out >> (8 * i)) & 0x7Cu) == 0x7Cu) out &= ~(0x40u << (8 * i));
          }
          break;
        case DataFill::kRawBits:  // int8 and int4 codes are all valid
          break;
      }
    } else {
      switch (spec.meta) {
        case MetaFill::kFP8Scale:  // scale = amax / FP8_MAX of a row whose amax is in [1, 2), as quantized
          out = __float_as_uint((1.0f + unit_float(r0)) / spec.fp8_max);
          break;
        case MetaFill::kInt8Scales:  // two fp16 group scales in [0.01, 0.02)
          out = uint32_t(__half_as_ushort(__float2half_rn(0.01f + 0.01f * unit_float(r0)))) |
                (uint32_t(__half_as_ushort(__float2half_rn(0.01f + 0.01f * unit_float(r1)))) << 16);
          break;
        // int4: fp16 scale in [0.01, 0.02) at the lower address, then fp16 shift in [-0.1, 0.1).
        case MetaFill::kInt4ScaleShift:
          out = uint32_t(__half_as_ushort(__float2half_rn(0.01f + 0.01f * unit_float(r0)))) |
                (uint32_t(__half_as_ushort(__float2half_rn(0.2f * unit_float(r1) - 0.1f))) << 16);
          break;
        case MetaFill::kNone:
          break;
      }
    }
    buf[w] = out;
  }
}

// Holds the stream until the host sets flag[0] (host-mapped memory), so a batch of timed launches is fully
// enqueued before the first one runs. Gives up after timeout_ns and sets flag[1], so a library call that
// synchronizes inside the batch cannot hang the benchmark.
__global__ void wait_for_host_kernel(volatile int* flag, uint64_t timeout_ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (flag[0] == 0) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      flag[1] = 1;
      break;
    }
    __nanosleep(1000);
  }
}

// Builds a paged pool from a contiguous cache: page i of the contiguous K and V buffers becomes pool page
// perm[i] = [K tiles of all heads][V tiles of all heads] (include/qdec/kv_cache.h). Page parts are multiples
// of 16 bytes (16 tokens x row bytes).
__global__ void scatter_pages_kernel(uint8_t* __restrict__ pool, const uint8_t* __restrict__ k,
                                     const uint8_t* __restrict__ v, const int32_t* __restrict__ perm,
                                     uint64_t k_page_bytes, uint64_t v_page_bytes) {
  const uint64_t i = blockIdx.x;
  uint8_t* dst = pool + uint64_t(perm[i]) * (k_page_bytes + v_page_bytes);
  const uint4* ks = reinterpret_cast<const uint4*>(k + i * k_page_bytes);
  const uint4* vs = reinterpret_cast<const uint4*>(v + i * v_page_bytes);
  for (uint64_t w = threadIdx.x; w < k_page_bytes / 16; w += blockDim.x) reinterpret_cast<uint4*>(dst)[w] = ks[w];
  for (uint64_t w = threadIdx.x; w < v_page_bytes / 16; w += blockDim.x)
    reinterpret_cast<uint4*>(dst + k_page_bytes)[w] = vs[w];
}

// ---- Device ---------------------------------------------------------------------------------------------

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t total_mem_bytes = 0;
  int sm_clock_khz = 0;   // peak
  int mem_clock_khz = 0;  // peak
  int mem_bus_bits = 0;
  // 2 (double data rate) x memory clock x bus width; 0 when the driver does not report the clocks.
  double theoretical_dram_gbps = 0.0;
};

DeviceInfo query_device(int ordinal) {
  DeviceInfo d;
  d.ordinal = ordinal;
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = size_t(prop.l2CacheSize);
  d.total_mem_bytes = prop.totalGlobalMem;
  // Clocks are informative only: a driver that does not report them leaves 0.
  if (cudaDeviceGetAttribute(&d.sm_clock_khz, cudaDevAttrClockRate, ordinal) != cudaSuccess) d.sm_clock_khz = 0;
  if (cudaDeviceGetAttribute(&d.mem_clock_khz, cudaDevAttrMemoryClockRate, ordinal) != cudaSuccess) {
    d.mem_clock_khz = 0;
  }
  if (cudaDeviceGetAttribute(&d.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, ordinal) != cudaSuccess) {
    d.mem_bus_bits = 0;
  }
  cudaGetLastError();  // clear a failed attribute query
  d.theoretical_dram_gbps = 2.0 * d.mem_clock_khz * 1e3 * (d.mem_bus_bits / 8.0) / 1e9;
  return d;
}

void launch_fill(void* buf, size_t bytes, const FillSpec& spec, const DeviceInfo& dev, cudaStream_t stream) {
  if (bytes % 4 != 0) throw BenchError(fmt::format("fill: {} bytes is not a multiple of 4", bytes));
  const uint64_t n_words = bytes / 4;
  if (n_words == 0) return;
  const int threads = 256;
  const uint64_t blocks = std::min<uint64_t>((n_words + threads - 1) / threads, uint64_t(dev.sm_count) * 16);
  fill_kernel<<<unsigned(blocks), threads, 0, stream>>>(static_cast<uint32_t*>(buf), n_words, spec);
  BENCH_CUDA(cudaGetLastError());
}

FillSpec kv_fill_spec(const KvTileLayout& t, uint64_t seed) {
  FillSpec s;
  s.tile_words = t.tile_bytes() / 4;
  s.meta_word_offset = t.meta_offset() / 4;
  s.seed_hash = mix64(seed);
  switch (t.format.kind) {
    case KvKind::kBF16:
      s.data = DataFill::kBF16;
      break;
    case KvKind::kFP16:
      s.data = DataFill::kFP16;
      break;
    case KvKind::kFP8E4M3:
      s.data = DataFill::kFP8E4M3;
      s.meta = MetaFill::kFP8Scale;
      s.fp8_max = 448.0f;
      break;
    case KvKind::kFP8E5M2:
      s.data = DataFill::kFP8E5M2;
      s.meta = MetaFill::kFP8Scale;
      s.fp8_max = 57344.0f;
      break;
    case KvKind::kINT8:
      s.data = DataFill::kRawBits;
      s.meta = MetaFill::kInt8Scales;
      break;
    case KvKind::kINT4:
      s.data = DataFill::kRawBits;
      s.meta = MetaFill::kInt4ScaleShift;
      break;
  }
  return s;
}

// Q (and anything else with no meta): one tile of 16-bit values in [-1, 1).
FillSpec dense_fill_spec(size_t bytes, DType dtype, uint64_t seed) {
  FillSpec s;
  s.tile_words = std::max<uint64_t>(bytes / 4, 1);
  s.meta_word_offset = s.tile_words;
  s.data = dtype == DType::kFP16 ? DataFill::kFP16 : DataFill::kBF16;
  s.seed_hash = mix64(seed);
  return s;
}

// ---- Statistics -------------------------------------------------------------------------------------------

// "No value" for optional numbers (nvcc's front end trips over copies of std::optional inside std::vector).
constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();
bool has_value(double x) {
  return !std::isnan(x);
}

struct TimeStats {
  double median_us = 0, min_us = 0, mean_us = 0, max_us = 0;
  double sm_mhz = 0;  // time_launches: the SM clock right after the timed launches (a clock probe); 0 = not read
  std::vector<double> times_us;
};

TimeStats summarize(std::vector<double> us) {
  TimeStats t;
  t.times_us = us;
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  t.median_us = n % 2 == 1 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  t.min_us = us.front();
  t.max_us = us.back();
  t.mean_us = std::accumulate(us.begin(), us.end(), 0.0) / double(n);
  return t;
}

// ---- Ceilings ---------------------------------------------------------------------------------------------

struct Ceilings {
  size_t copy_bytes = 0;  // read + written
  TimeStats copy;
  double copy_gbps = 0;
  size_t read_bytes = 0;
  TimeStats read;
  double read_gbps = 0;
  int read_blocks = 0;
  int read_threads = 0;
  int read_two_blocks = 0;  // grid of read_two_stream_kernel (512 threads): the --read-bound kernel
};

Ceilings measure_ceilings(const DeviceInfo& dev, cudaStream_t stream) {
  constexpr int kWarmup = 3;
  constexpr int kRuns = 30;
  // 2 GiB streams far past any L2; shrink only if the device cannot hold it.
  size_t free_bytes = 0, total_bytes = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  size_t bytes = size_t(2) << 30;
  bytes = std::min(bytes, free_bytes / 2) & ~size_t(4095);
  if (bytes < 8 * dev.l2_bytes) {
    throw BenchError(fmt::format("ceilings: only {} bytes free, need {} (8x L2)", free_bytes, 8 * dev.l2_bytes));
  }
  DeviceBuffer buf(bytes);
  DeviceBuffer sink(sizeof(uint32_t));
  launch_fill(buf.get(), bytes, dense_fill_spec(bytes, DType::kBF16, 0xce11), dev, stream);
  BENCH_CUDA(cudaStreamSynchronize(stream));

  auto time_runs = [&](auto&& launch) {
    for (int i = 0; i < kWarmup; ++i) launch();
    std::vector<double> us;
    Event start, stop;
    for (int i = 0; i < kRuns; ++i) {
      BENCH_CUDA(cudaEventRecord(start.get(), stream));
      launch();
      BENCH_CUDA(cudaEventRecord(stop.get(), stream));
      BENCH_CUDA(cudaEventSynchronize(stop.get()));
      us.push_back(1e3 * elapsed_ms(start, stop));
    }
    return summarize(std::move(us));
  };

  Ceilings c;
  // (a) device-to-device copy of half the buffer into the other half.
  const size_t half = bytes / 2;
  c.copy_bytes = 2 * half;
  c.copy = time_runs([&] {
    BENCH_CUDA(
        cudaMemcpyAsync(static_cast<char*>(buf.get()) + half, buf.get(), half, cudaMemcpyDeviceToDevice, stream));
  });
  c.copy_gbps = double(c.copy_bytes) / (c.copy.median_us * 1e-6) / 1e9;

  // (b) read-only stream over the whole buffer, every SM fully occupied.
  c.read_threads = 512;
  c.read_blocks = full_grid_blocks(read_stream_kernel, c.read_threads, dev.sm_count);
  c.read_two_blocks = full_grid_blocks(read_two_stream_kernel, 512, dev.sm_count);
  c.read_bytes = bytes;
  c.read = time_runs([&] {
    read_stream_kernel<<<c.read_blocks, c.read_threads, 0, stream>>>(buf.as<const uint4>(), bytes / 16,
                                                                     sink.as<uint32_t>());
    BENCH_CUDA(cudaGetLastError());
  });
  c.read_gbps = double(c.read_bytes) / (c.read.median_us * 1e-6) / 1e9;
  return c;
}

// ---- Shapes and formats -----------------------------------------------------------------------------------

struct Shape {
  std::string family;  // seed000, long, smollm2
  int batch = 1;
  int num_qo_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 128;
  int t_max = 1;
  std::vector<int32_t> seq_lens;  // host, [batch]

  // Stable key shared with bench/torch_sdpa.py.
  std::string key() const {
    return fmt::format("B{}-T{}-Hq{}-Hkv{}-D{}", batch, t_max, num_qo_heads, num_kv_heads, head_dim);
  }
  std::string label() const {
    return fmt::format("{} B={} T={} {}/{}x{}", family, batch, t_max, num_qo_heads, num_kv_heads, head_dim);
  }
  int64_t sum_seq_len() const { return std::accumulate(seq_lens.begin(), seq_lens.end(), int64_t(0)); }
};

struct FormatPair {
  KvFormat k;
  KvFormat v;
  std::string name() const { return k == v ? k.name() : k.name() + "/" + v.name(); }
  // Q and O follow the cache: fp16 for an fp16 cache, bf16 otherwise.
  DType q_dtype() const { return k.kind == KvKind::kFP16 || v.kind == KvKind::kFP16 ? DType::kFP16 : DType::kBF16; }
};

KvFormat parse_format_or_throw(const std::string& name) {
  KvFormat f;
  check_status(parse_kv_format(trim(name), &f), "--formats");
  return f;
}

std::vector<FormatPair> parse_formats(const std::string& spec) {
  std::vector<FormatPair> list;
  auto add = [&](const FormatPair& p) {
    for (const FormatPair& q : list) {
      if (q.k == p.k && q.v == p.v) return;
    }
    list.push_back(p);
  };
  add({KvFormat::bf16(), KvFormat::bf16()});  // the baseline of "x BF16" runs first in every shape
  for (const std::string& item : split_list(spec, ',')) {
    if (item == "all") {
      for (const KvFormat& f : all_kv_formats()) add({f, f});
      add({KvFormat::int8(32), KvFormat::int4(4)});
    } else if (size_t slash = item.find('/'); slash != std::string::npos) {
      add({parse_format_or_throw(item.substr(0, slash)), parse_format_or_throw(item.substr(slash + 1))});
    } else {
      const KvFormat f = parse_format_or_throw(item);
      add({f, f});
    }
  }
  return list;
}

std::vector<Shape> make_shapes(const AttentionBenchOptions& opts) {
  bool want_seed000 = false, want_long = false, want_smollm2 = false;
  for (const std::string& s : split_list(opts.shapes, ',')) {
    if (s == "all") {
      want_seed000 = want_long = want_smollm2 = true;
    } else if (s == "seed000") {
      want_seed000 = true;
    } else if (s == "long") {
      want_long = true;
    } else if (s == "smollm2") {
      want_smollm2 = true;
    } else {
      throw BenchError(fmt::format("--shapes: unknown shape family '{}' (accepted: seed000, long, smollm2, all)", s));
    }
  }
  std::vector<Shape> shapes;
  auto add = [&](std::string family, int b, int hq, int hkv, int d, int t) {
    Shape s{std::move(family), b, hq, hkv, d, t, {}};
    s.seq_lens.assign(size_t(b), t);
    if (opts.unequal) {
      // One draw per shape, shared by all formats, so the "x BF16" column compares equal work.
      std::mt19937_64 rng(mix64(opts.seed ^ std::hash<std::string>{}(s.key())));
      std::uniform_int_distribution<int> len(std::max(1, t / 2), t);
      for (int32_t& l : s.seq_lens) l = len(rng);
    }
    shapes.push_back(std::move(s));
  };
  if (want_seed000) {
    std::vector<int> batches = opts.batch.empty() ? std::vector<int>{32, 64, 128, 256, 512} : opts.batch;
    for (int b : batches) {
      if (b < 1) throw BenchError(fmt::format("--batch: {} is not a positive batch size", b));
      add("seed000", b, 8, 1, 128, opts.seq_len);
    }
  }
  if (want_long) {
    add("long", 1, 32, 8, 128, 32768);
    add("long", 1, 32, 8, 128, 131072);
  }
  if (want_smollm2) {
    for (int b : opts.smollm2_batch.empty() ? std::vector<int>{64} : opts.smollm2_batch) {
      if (b < 1) throw BenchError(fmt::format("--smollm2-batch: {} is not a positive batch size", b));
      add("smollm2", b, 9, 3, 64, 4096);
    }
  }
  return shapes;
}

ContiguousKvLayout make_layout(const KvFormat& f, const Shape& s, int t_max, int page_size) {
  ContiguousKvLayout l;
  l.tile.format = f;
  l.tile.head_dim = s.head_dim;
  l.tile.page_size = page_size;
  l.batch = int(s.seq_lens.size());
  l.t_max = t_max;
  l.num_kv_heads = s.num_kv_heads;
  return l;
}

// Fails on any NaN/Inf among n 16-bit values (bf16 and fp16 both have an all-ones exponent for them).
void check_finite_output(const std::vector<uint16_t>& o, DType dtype, std::string_view what) {
  const uint16_t exp_mask = dtype == DType::kFP16 ? 0x7C00 : 0x7F80;
  size_t bad = 0;
  for (uint16_t v : o) bad += (v & exp_mask) == exp_mask;
  if (bad > 0) throw BenchError(fmt::format("{}: output has {} non-finite values of {}", what, bad, o.size()));
}

double to_double(uint16_t bits, DType dtype) {
  return dtype == DType::kFP16 ? double(fp16_bits_to_float(bits)) : double(bf16_bits_to_float(bits));
}

// ---- Correctness check (--check) --------------------------------------------------------------------------

// The relative L2 error a kernel may have against the float64 reference on the same dequantized cache: the
// kernel rounds P (and dequantized K/V) to 16 bits, about 2^-8 relative, so 2e-2 only catches real bugs.
constexpr double kCheckTolerance = 2e-2;

// Returns the relative L2 error, or kNoValue when the library reports the pair unsupported (the timed case
// then reports it too).
double check_against_reference(const Shape& shape, const FormatPair& fp, const AttentionBenchOptions& opts,
                               const DeviceInfo& dev, cudaStream_t stream) {
  // Small problem with the shape's heads: lengths not multiples of the page, one shorter than a page.
  Shape small = shape;
  const int t_max = 3 * opts.page_size + 37;
  small.seq_lens = {t_max, (2 * t_max) / 3, 17};
  small.batch = 3;
  small.t_max = t_max;
  const int b = small.batch, hq = small.num_qo_heads, hkv = small.num_kv_heads, d = small.head_dim;
  const ContiguousKvLayout kl = make_layout(fp.k, small, t_max, opts.page_size);
  const ContiguousKvLayout vl = make_layout(fp.v, small, t_max, opts.page_size);
  const DType qd = fp.q_dtype();
  const size_t q_bytes = size_t(b) * hq * d * 2;

  DeviceBuffer k(kl.total_bytes()), v(vl.total_bytes()), q(q_bytes), o(q_bytes), lens(b * sizeof(int32_t));
  launch_fill(k.get(), k.bytes(), kv_fill_spec(kl.tile, opts.seed ^ 0xc4ec1), dev, stream);
  launch_fill(v.get(), v.bytes(), kv_fill_spec(vl.tile, opts.seed ^ 0xc4ec2), dev, stream);
  launch_fill(q.get(), q.bytes(), dense_fill_spec(q_bytes, qd, opts.seed ^ 0xc4ec3), dev, stream);
  BENCH_CUDA(cudaMemsetAsync(o.get(), 0xFF, q_bytes, stream));  // NaN in bf16 and fp16: unwritten O fails
  BENCH_CUDA(cudaMemcpyAsync(lens.get(), small.seq_lens.data(), b * sizeof(int32_t), cudaMemcpyHostToDevice, stream));

  DecodeAttentionParams p;
  p.batch = b;
  p.num_qo_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.q_dtype = qd;
  p.page_size = opts.page_size;
  set_contiguous_cache(&p, kl, k.get(), vl, v.get());
  p.seq_lens = lens.as<int32_t>();
  p.seq_lens_host = small.seq_lens.data();
  p.q = q.get();
  p.o = o.get();
  p.num_splits = opts.num_splits;
  p.cta_warps = opts.cta_warps;
  const std::string what = fmt::format("check {} {}", shape.label(), fp.name());
  size_t ws_bytes = 0;
  const Status ws_status = decode_attention_workspace_bytes(p, &ws_bytes);
  if (ws_status.code() == StatusCode::kUnsupported) return kNoValue;
  check_status(ws_status, what);
  DeviceBuffer ws(ws_bytes);
  p.workspace = ws.get();
  p.workspace_bytes = ws_bytes;
  check_status(decode_attention(p, stream), what);
  BENCH_CUDA(cudaGetLastError());

  std::vector<uint8_t> k_host(k.bytes()), v_host(v.bytes());
  std::vector<uint16_t> q_host(q_bytes / 2), o_host(q_bytes / 2);
  BENCH_CUDA(cudaMemcpyAsync(k_host.data(), k.get(), k.bytes(), cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaMemcpyAsync(v_host.data(), v.get(), v.bytes(), cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaMemcpyAsync(q_host.data(), q.get(), q_bytes, cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaMemcpyAsync(o_host.data(), o.get(), q_bytes, cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  check_finite_output(o_host, qd, what);

  const size_t kv_values = size_t(b) * t_max * hkv * d;
  std::vector<double> k64(kv_values), v64(kv_values), q64(q_host.size()), o64(q_host.size()), ref(q_host.size()),
      lse(size_t(b) * hq);
  dequantize_cache_f64(kl, KvRole::kKey, k_host.data(), small.seq_lens.data(), k64.data());
  dequantize_cache_f64(vl, KvRole::kValue, v_host.data(), small.seq_lens.data(), v64.data());
  for (size_t i = 0; i < q_host.size(); ++i) q64[i] = to_double(q_host[i], qd);
  for (size_t i = 0; i < o_host.size(); ++i) o64[i] = to_double(o_host[i], qd);
  decode_attention_reference(b, hq, hkv, d, t_max, 1.0 / std::sqrt(double(d)), q64.data(), k64.data(), v64.data(),
                             small.seq_lens.data(), ref.data(), lse.data());
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err2 += (o64[i] - ref[i]) * (o64[i] - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-300));
  if (!(rel <= kCheckTolerance)) {
    throw BenchError(fmt::format("{}: relative L2 error {:.3e} against the CPU reference exceeds {:.1e}", what, rel,
                                 kCheckTolerance));
  }
  return rel;
}

// ---- One case ---------------------------------------------------------------------------------------------

// Host-mapped flag pair for wait_for_host_kernel: [0] release, [1] timed out.
class HostFlag {
 public:
  HostFlag() {
    BENCH_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_), 2 * sizeof(int), cudaHostAllocMapped));
    BENCH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
    reset();
  }
  ~HostFlag() {
    if (host_ != nullptr) cudaFreeHost(host_);
  }
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;
  // The GPU reads and writes these words behind the compiler's back: every host access is volatile.
  void reset() {
    flag()[0] = 0;
    flag()[1] = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  void release() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    flag()[0] = 1;
  }
  bool timed_out() const { return flag()[1] != 0; }
  volatile int* device() const { return device_; }

 private:
  volatile int* flag() const { return host_; }
  int* host_ = nullptr;
  int* device_ = nullptr;
};

struct CaseResult {
  std::string status = "ok";  // ok, unsupported
  std::string message;
  int num_splits = 0;
  int cta_warps = 0;
  size_t workspace_bytes = 0;
  int rotation_sets = 0;
  size_t set_bytes = 0;
  TimeStats time;
  size_t k_bytes = 0, v_bytes = 0, q_bytes = 0, o_bytes = 0;
  size_t bytes() const { return k_bytes + v_bytes + q_bytes + o_bytes; }
  double flops = 0;
  double gbps = 0;
  double pct_read_ceiling = 0;
  double speedup_vs_bf16 = kNoValue;
  double check_rel_l2 = kNoValue;
  bool paged = false;
  double time_vs_contiguous = kNoValue;  // paged median / contiguous median (--cache both)
  // --graph: per-call median of CUDA graphs of graph_reps back-to-back calls (no per-launch event floor).
  double graph_us = kNoValue;
  double graph_pct_read_ceiling = kNoValue;
  double read_bound_us = kNoValue;         // --read-bound: median of the streaming read of this case's K and V bytes
  double read_bound_pct = kNoValue;        // bytes() / read_bound_us as % of the read ceiling
  double graph_read_bound_us = kNoValue;   // --read-bound --graph: per read in a graph of graph_reps reads
  double graph_read_bound_pct = kNoValue;  // bytes() / graph_read_bound_us as % of the read ceiling
  double append_us = kNoValue;             // --append: median of the fused append of this case's B tokens
  double append_gbps = kNoValue;
  size_t append_bytes = 0;
  double append_pct_of_step = kNoValue;   // append median / this case's decode median
  double step_with_append_us = kNoValue;  // append, then attention as its programmatic dependent
  double append_marginal_pct = kNoValue;  // (step_with_append - decode) / decode
  // --graph-reps: per-step medians of CUDA-graph replays (no per-launch event floor).
  double graph_append_us = kNoValue;                     // the append alone
  double graph_step_us = kNoValue;                       // the attention alone
  double graph_step_with_append_us = kNoValue;           // append, then attention as its programmatic dependent
  double graph_append_pct_of_step = kNoValue;            // graph_append_us / graph_step_us
  double graph_marginal_pct = kNoValue;                  // (graph_step_with_append - graph_step) / graph_step
  double graph_step_serial_us = kNoValue;                // append, then attention in plain stream order (no PDL)
  double graph_serial_marginal_pct = kNoValue;           // (graph_step_serial - graph_step) / graph_step
  std::vector<std::pair<std::string, double>> timeline;  // --timeline: (column, median µs)
  json timeline_ctas;  // --timeline: per sample, per attention CTA [SM, ready, loop end, exit] (µs from t0)
};

// --timeline: kTimelineCalls samples, each the last of kTimelineRun back-to-back calls (every CTA overwrites its
// stamps; the tables reset before the run and read after it) -> the medians over the samples of each column: a phase's
// quantile over the CTAs that ran, in µs from the call's first attention CTA entry (src/attention/decode_timeline.h
// names the phases). merge columns are empty for unsplit calls.
constexpr int kTimelineCalls = 7;
constexpr int kTimelineRun = 3;
std::vector<std::pair<std::string, double>> decode_timeline_columns(const std::function<void(int)>& call, json* raw) {
  namespace at = qdec::attention;
  struct Col {
    const char* name;
    bool merge;  // a column over the merge CTAs
    int slot;
    double q;  // quantile over the CTAs (0 min, 1 max)
  };
  static const Col cols[] = {
      {"entry p50", false, at::kDecTlEntry, 0.5},   {"entry max", false, at::kDecTlEntry, 1},
      {"issued p50", false, at::kDecTlIssued, 0.5}, {"q p50", false, at::kDecTlQ, 0.5},
      {"ready p50", false, at::kDecTlReady, 0.5},   {"ready max", false, at::kDecTlReady, 1},
      {"first p50", false, at::kDecTlFirst, 0.5},   {"first max", false, at::kDecTlFirst, 1},
      {"loop p10", false, at::kDecTlLoopEnd, 0.1},  {"loop p50", false, at::kDecTlLoopEnd, 0.5},
      {"loop max", false, at::kDecTlLoopEnd, 1},    {"staged p50", false, at::kDecTlStaged, 0.5},
      {"exit p50", false, at::kDecTlExit, 0.5},     {"exit max", false, at::kDecTlExit, 1},
      {"m entry min", true, at::kDecTlEntry, 0},    {"m entry max", true, at::kDecTlEntry, 1},
      {"m wait min", true, at::kDecTlReady, 0},     {"m wait p50", true, at::kDecTlReady, 0.5},
      {"m summed p50", true, at::kDecTlFirst, 0.5}, {"m barrier p50", true, at::kDecTlLoopEnd, 0.5},
      {"m exit max", true, at::kDecTlExit, 1}};
  constexpr int kS = at::kDecTlSlots;
  std::vector<std::vector<double>> per(std::size(cols) + 3);  // + CTAs, merge CTAs, span
  for (int r = 0; r < kTimelineCalls; ++r) {
    check_status(at::decode_timeline(true, nullptr, nullptr), "--timeline reset");
    call(r);
    std::vector<unsigned long long> att, merge;
    check_status(at::decode_timeline(false, &att, &merge), "--timeline read");
    const std::vector<unsigned long long>* tables[2] = {&att, &merge};
    unsigned long long t0 = ~0ull, t1 = 0;
    int ctas[2] = {0, 0};
    for (int m = 0; m < 2; ++m) {
      const auto& t = *tables[m];
      for (size_t c = 0; c * kS < t.size(); ++c) {
        if (t[c * kS] == 0) continue;
        ++ctas[m];
        if (m == 0) t0 = std::min(t0, t[c * kS]);
        t1 = std::max(t1, t[c * kS + at::kDecTlExit]);
      }
    }
    if (ctas[0] == 0) throw BenchError("--timeline: no attention CTA recorded a stamp");
    per[0].push_back(ctas[0]);
    per[1].push_back(ctas[1]);
    per[2].push_back((double(t1) - double(t0)) / 1e3);
    json sample = json::array();
    for (size_t c = 0; c * kS < att.size(); ++c) {
      if (att[c * kS] == 0) continue;
      auto us = [&](int slot) { return std::round((double(att[c * kS + slot]) - double(t0)) / 10.0) / 100.0; };
      sample.push_back({att[c * kS + at::kDecTlSm], us(at::kDecTlReady), us(at::kDecTlLoopEnd), us(at::kDecTlExit)});
    }
    raw->push_back(std::move(sample));
    for (size_t k = 0; k < std::size(cols); ++k) {
      const auto& t = *tables[cols[k].merge ? 1 : 0];
      std::vector<double> v;
      for (size_t c = 0; c * kS < t.size(); ++c)
        if (t[c * kS] != 0 && t[c * kS + cols[k].slot] != 0)  // a slot its kernel does not stamp stays 0
          v.push_back((double(t[c * kS + cols[k].slot]) - double(t0)) / 1e3);
      if (!v.empty()) per[k + 3].push_back(quantile(v, cols[k].q));
    }
  }
  std::vector<std::pair<std::string, double>> out = {
      {"ctas", quantile(per[0], 0.5)}, {"merge ctas", quantile(per[1], 0.5)}, {"span", quantile(per[2], 0.5)}};
  for (size_t k = 0; k < std::size(cols); ++k)
    if (!per[k + 3].empty()) out.emplace_back(cols[k].name, quantile(per[k + 3], 0.5));
  return out;
}

// Launches per stream hold: 4 queue entries each (2 events, up to 2 kernels) stays far below the driver's
// launch-queue depth, so the host never blocks while the spin kernel waits for it.
constexpr int kLaunchesPerHold = 32;
constexpr uint64_t kHoldTimeoutNs = 5'000'000'000ull;

// Times `launch` (which enqueues one operation on `stream` for iteration i): warm-up, then every launch
// between its own pair of events, the stream held by the spin kernel until each batch is enqueued.
TimeStats time_launches(const AttentionBenchOptions& opts, cudaStream_t stream, HostFlag& flag, const std::string& what,
                        const std::function<Status(int)>& launch) {
  // Warm-up: opts.warmup launches, then batches of them until opts.warmup_ms have passed, so that the timed
  // launches run at the clock a busy GPU holds (a decode loop's), not while it ramps up after the set-up.
  if (opts.cool_ms > 0) {  // an idle GPU first, so that the clock does not depend on the cases before this one
    BENCH_CUDA(cudaStreamSynchronize(stream));
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opts.cool_ms));
  }
  const auto warm_start = std::chrono::steady_clock::now();
  for (int i = 0; i < opts.warmup; ++i) check_status(launch(i), what);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(stream));
  keep_busy_until(stream, warm_start, opts.warmup_ms, kLaunchesPerHold, [&](int i) { check_status(launch(i), what); });
  std::vector<Event> start(size_t(opts.iters)), stop(size_t(opts.iters));
  for (int first = 0; first < opts.iters; first += kLaunchesPerHold) {
    const int last = std::min(opts.iters, first + kLaunchesPerHold);
    flag.reset();
    if (opts.hold) {
      wait_for_host_kernel<<<1, 1, 0, stream>>>(flag.device(), kHoldTimeoutNs);
      BENCH_CUDA(cudaGetLastError());
    }
    // If a CUDA call throws mid-batch, release the stream on the way out rather than wait for the timeout.
    struct ReleaseOnExit {
      HostFlag& flag;
      ~ReleaseOnExit() { flag.release(); }
    } release_on_exit{flag};
    std::string launch_error;
    for (int i = first; i < last && launch_error.empty(); ++i) {
      BENCH_CUDA(cudaEventRecord(start[i].get(), stream));
      const Status launched = launch(opts.warmup + i);
      BENCH_CUDA(cudaEventRecord(stop[i].get(), stream));
      if (!launched.ok()) launch_error = launched.to_string();
    }
    flag.release();
    BENCH_CUDA(cudaStreamSynchronize(stream));
    if (!launch_error.empty()) throw BenchError(fmt::format("{}: {}", what, launch_error));
    BENCH_CUDA(cudaGetLastError());
    if (flag.timed_out()) {
      throw BenchError(
          fmt::format("{}: the stream hold timed out: enqueuing {} launches took over {} s (does the library call "
                      "synchronize?)",
                      what, last - first, kHoldTimeoutNs / 1e9));
    }
  }
  // The SM clock the batch ended at: one thread spinning a known number of cycles, between events.
  constexpr long long kProbeCycles = 200000;
  Event probe_start, probe_stop;
  BENCH_CUDA(cudaEventRecord(probe_start.get(), stream));
  clock_probe_kernel<<<1, 1, 0, stream>>>(kProbeCycles);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaEventRecord(probe_stop.get(), stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> us;
  for (int i = 0; i < opts.iters; ++i) us.push_back(1e3 * elapsed_ms(start[i], stop[i]));
  TimeStats t = summarize(std::move(us));
  const double probe_ms = elapsed_ms(probe_start, probe_stop);
  t.sm_mhz = probe_ms > 0 ? kProbeCycles / (1e3 * probe_ms) : 0.0;
  return t;
}

// A CUDA graph of `reps` calls of `enqueue(j)` (j = 0..reps-1) on `stream`, replayed between events.
class StepGraph {
 public:
  StepGraph(cudaStream_t stream, int reps, const std::string& what, const std::function<Status(int)>& enqueue)
      : stream_(stream), reps_(reps) {
    BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    std::string error;  // the first failed enqueue; the capture is ended either way
    for (int j = 0; j < reps && error.empty(); ++j) {
      const Status st = enqueue(j);
      if (!st.ok()) error = st.to_string();
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!error.empty()) {
      if (graph) cudaGraphDestroy(graph);
      throw BenchError(fmt::format("{} (graph capture): {}", what, error));
    }
    BENCH_CUDA(end);
    const cudaError_t inst = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    BENCH_CUDA(inst);
  }
  ~StepGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  // One replay between `start` and `stop`; returns µs per call.
  double replay(const Event& start, const Event& stop) {
    BENCH_CUDA(cudaEventRecord(start.get(), stream_));
    BENCH_CUDA(cudaGraphLaunch(exec_, stream_));
    BENCH_CUDA(cudaEventRecord(stop.get(), stream_));
    BENCH_CUDA(cudaEventSynchronize(stop.get()));
    return 1e3 * elapsed_ms(start, stop) / reps_;
  }

 private:
  cudaStream_t stream_;
  int reps_;
  cudaGraphExec_t exec_ = nullptr;
};

// Per-call medians of graphs replayed in turn (graph 0, 1, ..., 0, 1, ...): `iters` replays of each after
// `warmup` rounds, so that clock drift affects every graph alike.
std::vector<double> time_graphs_interleaved(const AttentionBenchOptions& opts, std::vector<StepGraph*> graphs) {
  Event start, stop;
  std::vector<std::vector<double>> us(graphs.size());
  for (int it = 0; it < opts.warmup + opts.iters; ++it)
    for (size_t g = 0; g < graphs.size(); ++g) {
      const double t = graphs[g]->replay(start, stop);
      if (it >= opts.warmup) us[g].push_back(t);
    }
  std::vector<double> med;
  for (auto& v : us) med.push_back(summarize(std::move(v)).median_us);
  return med;
}

// A random page permutation: sequence b's page j lives at pool page perm[b * pages_per_seq + j].
std::vector<int32_t> shuffled_pages(int num_pages, uint64_t seed) {
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(mix64(seed));
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

CaseResult run_case(const Shape& shape, const FormatPair& fp, const AttentionBenchOptions& opts, const DeviceInfo& dev,
                    const Ceilings& ceil, cudaStream_t stream, HostFlag& flag, bool paged) {
  CaseResult r;
  const std::string what = fmt::format("{} {}{}", shape.label(), fp.name(), paged ? " paged" : "");
  const DType qd = fp.q_dtype();
  const ContiguousKvLayout kl = make_layout(fp.k, shape, shape.t_max, opts.page_size);
  const ContiguousKvLayout vl = make_layout(fp.v, shape, shape.t_max, opts.page_size);
  const KvPageLayout page_layout{fp.k, fp.v, shape.head_dim, opts.page_size, shape.num_kv_heads};
  const size_t qo_bytes = size_t(shape.batch) * shape.num_qo_heads * shape.head_dim * 2;

  // Declared traffic: the rows of live tokens of K and V (data + scales), Q in, O out.
  const int64_t tokens = shape.sum_seq_len();
  r.k_bytes = size_t(tokens) * shape.num_kv_heads * kv_row_bytes(fp.k, shape.head_dim);
  r.v_bytes = size_t(tokens) * shape.num_kv_heads * kv_row_bytes(fp.v, shape.head_dim);
  r.q_bytes = qo_bytes;
  r.o_bytes = qo_bytes;
  r.flops = 4.0 * double(tokens) * shape.num_qo_heads * shape.head_dim;  // Q K^T and P V, 2 flops per MAC

  DeviceBuffer lens(shape.seq_lens.size() * sizeof(int32_t));
  BENCH_CUDA(cudaMemcpyAsync(lens.get(), shape.seq_lens.data(), lens.bytes(), cudaMemcpyHostToDevice, stream));
  // Paged: every set shares one shuffled block table (the identity layout of a contiguous cache, permuted).
  const int num_pages = shape.batch * kl.pages_per_seq();
  std::vector<int32_t> table;
  if (paged) {
    table = shuffled_pages(num_pages, opts.seed ^ 0x9a9e);
    if (opts.page_order == "sequential") std::iota(table.begin(), table.end(), 0);
  }
  DeviceBuffer d_table(table.size() * sizeof(int32_t));
  if (paged) BENCH_CUDA(cudaMemcpyAsync(d_table.get(), table.data(), d_table.bytes(), cudaMemcpyHostToDevice, stream));
  auto bind = [&](DecodeAttentionParams* p, void* k, void* v, void* pool) {
    if (paged)
      set_paged_cache(p, page_layout, pool, num_pages, d_table.as<int32_t>(), table.data(), kl.pages_per_seq());
    else
      set_contiguous_cache(p, kl, k, vl, v);
  };

  DecodeAttentionParams base;
  base.batch = shape.batch;
  base.num_qo_heads = shape.num_qo_heads;
  base.num_kv_heads = shape.num_kv_heads;
  base.head_dim = shape.head_dim;
  base.q_dtype = qd;
  base.page_size = opts.page_size;
  base.seq_lens = lens.as<int32_t>();
  base.seq_lens_host = shape.seq_lens.data();
  base.num_splits = opts.num_splits;
  base.cta_warps = opts.cta_warps;
  // Validate the real problem before allocating gigabytes, with a small real allocation standing in for
  // every buffer (nothing is launched), so an unsupported (shape, format) is reported cheaply.
  {
    DeviceBuffer stand_in(256);
    DecodeAttentionParams probe = base;
    bind(&probe, stand_in.get(), stand_in.get(), stand_in.get());
    probe.q = stand_in.get();
    probe.o = stand_in.get();
    const Status s = decode_attention_workspace_bytes(probe, &r.workspace_bytes);
    if (s.code() == StatusCode::kUnsupported) {
      r.status = "unsupported";
      r.message = s.to_string();
      return r;
    }
    check_status(s, what);
  }

  // Rotation: ceil(4 L2 / set) sets, so that consecutive launches never find their inputs in L2 (the sets
  // together exceed 2x L2 with room to spare; one set when a set alone is over 4x L2), capped by free memory.
  // A paged set is built from a contiguous one, so it needs room for both while it is made.
  r.set_bytes = kl.total_bytes() + vl.total_bytes() + 2 * qo_bytes;
  const uint64_t want_sets = std::max<uint64_t>(1, (4 * uint64_t(dev.l2_bytes) + r.set_bytes - 1) / r.set_bytes);
  size_t free_bytes = 0, total_bytes = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t headroom = r.workspace_bytes + (size_t(256) << 20) + (paged ? r.set_bytes : 0);
  const uint64_t fit_sets = free_bytes > headroom ? (free_bytes - headroom) / r.set_bytes : 0;
  if (fit_sets < 1) {
    throw BenchError(fmt::format("{}: one input set needs {} bytes, {} bytes are free", what, r.set_bytes, free_bytes));
  }
  r.rotation_sets = int(std::min<uint64_t>({want_sets, fit_sets, 64}));

  struct Set {
    DeviceBuffer k, v, pool, q, o;
  };
  std::vector<Set> sets;
  std::vector<DecodeAttentionParams> params;
  DeviceBuffer ws(r.workspace_bytes);  // launches are stream-ordered, so all sets share one workspace
  for (int i = 0; i < r.rotation_sets; ++i) {
    Set s{DeviceBuffer(kl.total_bytes()), DeviceBuffer(vl.total_bytes()), DeviceBuffer(), DeviceBuffer(qo_bytes),
          DeviceBuffer(qo_bytes)};
    const uint64_t seed = mix64(opts.seed + uint64_t(i));
    launch_fill(s.k.get(), s.k.bytes(), kv_fill_spec(kl.tile, seed ^ 1), dev, stream);
    launch_fill(s.v.get(), s.v.bytes(), kv_fill_spec(vl.tile, seed ^ 2), dev, stream);
    launch_fill(s.q.get(), s.q.bytes(), dense_fill_spec(qo_bytes, qd, seed ^ 3), dev, stream);
    BENCH_CUDA(cudaMemsetAsync(s.o.get(), 0xFF, qo_bytes, stream));  // NaN: an unwritten O fails the check
    if (paged) {
      // The contiguous buffers are freed as soon as their pages are in the pool.
      DeviceBuffer pool(size_t(num_pages) * page_layout.page_bytes());
      scatter_pages_kernel<<<unsigned(num_pages), 256, 0, stream>>>(pool.as<uint8_t>(), s.k.as<uint8_t>(),
                                                                    s.v.as<uint8_t>(), d_table.as<int32_t>(),
                                                                    kl.page_bytes(), vl.page_bytes());
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaStreamSynchronize(stream));
      sets.push_back(Set{DeviceBuffer(), DeviceBuffer(), std::move(pool), std::move(s.q), std::move(s.o)});
    } else {
      sets.push_back(std::move(s));
    }
    const Set& set = sets.back();
    DecodeAttentionParams p = base;
    bind(&p, set.k.get(), set.v.get(), set.pool.get());
    p.q = set.q.get();
    p.o = set.o.get();
    p.workspace = ws.get();
    p.workspace_bytes = r.workspace_bytes;
    params.push_back(p);
  }
  check_status(decode_attention_num_splits(params[0], &r.num_splits), what);
  check_status(decode_attention_cta_warps(params[0], &r.cta_warps), what);
  BENCH_CUDA(cudaStreamSynchronize(stream));

  r.time = time_launches(opts, stream, flag, what,
                         [&](int i) { return decode_attention(params[size_t(i) % params.size()], stream); });
  // --read-bound (contiguous): the read ceiling's kernel over set i's K and V, timed like the case (and, with --graph,
  // in a graph of as many back-to-back reads, replayed in turn with the case's graph).
  const bool read_bound = opts.read_bound && !paged;
  DeviceBuffer sink(read_bound ? 16 : 0);
  std::function<Status(int)> read_launch;
  if (read_bound) {
    read_launch = [&](int i) {
      const Set& set = sets[size_t(i) % sets.size()];
      read_two_stream_kernel<<<ceil.read_two_blocks, 512, 0, stream>>>(set.k.as<const uint4>(), set.k.bytes() / 16,
                                                                       set.v.as<const uint4>(), set.v.bytes() / 16,
                                                                       sink.as<uint32_t>());
      const cudaError_t err = cudaGetLastError();
      return err == cudaSuccess
                 ? Status::Ok()
                 : Status(StatusCode::kCudaError, std::string("read bound kernel: ") + cudaGetErrorString(err));
    };
    r.read_bound_us = time_launches(opts, stream, flag, what + " read bound", read_launch).median_us;
  }
  if (opts.graph && opts.graph_reps > 0) {  // back-to-back calls, as a decode step captured in a graph issues them
    StepGraph g(stream, opts.graph_reps, what + " graph",
                [&](int j) { return decode_attention(params[size_t(j) % params.size()], stream); });
    if (read_launch) {
      StepGraph gr(stream, opts.graph_reps, what + " read bound graph", read_launch);
      const std::vector<double> med = time_graphs_interleaved(opts, {&g, &gr});
      r.graph_us = med[0];
      r.graph_read_bound_us = med[1];
    } else {
      r.graph_us = time_graphs_interleaved(opts, {&g})[0];
    }
  }

  if (opts.timeline) {
    r.timeline = decode_timeline_columns(
        [&](int i) {  // the stamps of the last call stand
          for (int j = 0; j < kTimelineRun; ++j)
            check_status(decode_attention(params[size_t(i * kTimelineRun + j) % params.size()], stream),
                         what + " timeline");
          BENCH_CUDA(cudaStreamSynchronize(stream));
        },
        &r.timeline_ctas);
  }

  // --append (paged): the fused append of this step's B new tokens (one per sequence, at position
  // seq_len - 1, so into the pages the step reads last; RoPE rotate-half, theta 10^4) into the same pools,
  // timed alone, and as the step an engine runs: append, then attention launched as its programmatic
  // dependent. The marginal cost of the append in the step is (append + attention) - attention.
  if (paged && opts.append) {
    const size_t row_values = size_t(shape.batch) * shape.num_kv_heads * shape.head_dim;
    DeviceBuffer k_rows(row_values * 2), v_rows(row_values * 2), d_start(size_t(shape.batch) * sizeof(int32_t));
    launch_fill(k_rows.get(), k_rows.bytes(), dense_fill_spec(k_rows.bytes(), qd, opts.seed ^ 0xa1), dev, stream);
    launch_fill(v_rows.get(), v_rows.bytes(), dense_fill_spec(v_rows.bytes(), qd, opts.seed ^ 0xa2), dev, stream);
    std::vector<int32_t> start(shape.seq_lens.begin(), shape.seq_lens.end());
    for (int32_t& x : start) x -= 1;
    BENCH_CUDA(cudaMemcpyAsync(d_start.get(), start.data(), d_start.bytes(), cudaMemcpyHostToDevice, stream));
    std::vector<KvAppendParams> append;
    for (const Set& set : sets) {
      KvAppendParams a;
      a.k = k_rows.get();
      a.v = v_rows.get();
      a.dtype = qd;
      a.batch = shape.batch;
      a.start_pos = d_start.as<int32_t>();
      a.start_pos_host = start.data();
      a.layout = page_layout;
      a.pool = set.pool.get();
      a.num_pages = num_pages;
      a.block_table = d_table.as<int32_t>();
      a.block_table_host = table.data();
      a.max_pages_per_seq = kl.pages_per_seq();
      a.rope = RopeStyle::kHalf;
      append.push_back(a);
    }
    BENCH_CUDA(cudaStreamSynchronize(stream));
    const TimeStats alone = time_launches(opts, stream, flag, what + " append",
                                          [&](int i) { return kv_append(append[size_t(i) % append.size()], stream); });
    const TimeStats pair = time_launches(opts, stream, flag, what + " append+attention", [&](int i) {
      const size_t k = size_t(i) % append.size();
      QDEC_RETURN_IF_ERROR(kv_append(append[k], stream));
      DecodeAttentionParams dp = params[k];
      dp.programmatic_tail_tokens = 1;
      return decode_attention(dp, stream);
    });
    r.append_us = alone.median_us;
    r.append_bytes = 2 * row_values * 2 + size_t(shape.batch) * shape.num_kv_heads *
                                              (kv_row_bytes(fp.k, shape.head_dim) + kv_row_bytes(fp.v, shape.head_dim));
    r.append_gbps = double(r.append_bytes) / (alone.median_us * 1e-6) / 1e9;
    r.append_pct_of_step = 100.0 * alone.median_us / r.time.median_us;
    r.step_with_append_us = pair.median_us;
    r.append_marginal_pct = 100.0 * (pair.median_us - r.time.median_us) / r.time.median_us;
    if (opts.graph_reps > 0) {
      const int reps = opts.graph_reps;
      StepGraph g_append(stream, reps, what + " append graph",
                         [&](int j) { return kv_append(append[size_t(j) % append.size()], stream); });
      StepGraph g_step(stream, reps, what + " step graph",
                       [&](int j) { return decode_attention(params[size_t(j) % params.size()], stream); });
      StepGraph g_pair(stream, reps, what + " append+step graph", [&](int j) {
        const size_t k = size_t(j) % append.size();
        QDEC_RETURN_IF_ERROR(kv_append(append[k], stream));
        DecodeAttentionParams dp = params[k];
        dp.programmatic_tail_tokens = 1;
        return decode_attention(dp, stream);
      });
      StepGraph g_serial(stream, reps, what + " append,step graph", [&](int j) {
        const size_t k = size_t(j) % append.size();
        QDEC_RETURN_IF_ERROR(kv_append(append[k], stream));
        return decode_attention(params[k], stream);
      });
      const std::vector<double> med = time_graphs_interleaved(opts, {&g_append, &g_step, &g_pair, &g_serial});
      r.graph_step_serial_us = med[3];
      r.graph_serial_marginal_pct = 100.0 * (med[3] - med[1]) / med[1];
      r.graph_append_us = med[0];
      r.graph_step_us = med[1];
      r.graph_step_with_append_us = med[2];
      r.graph_append_pct_of_step = 100.0 * med[0] / med[1];
      r.graph_marginal_pct = 100.0 * (med[2] - med[1]) / med[1];
    }
  }

  // Every set that ran must hold a finite output (O was NaN-poisoned before the first launch).
  const size_t used_sets = std::min<size_t>(params.size(), size_t(opts.warmup + opts.iters));
  std::vector<uint16_t> o_host(qo_bytes / 2);
  for (size_t i = 0; i < used_sets; ++i) {
    BENCH_CUDA(cudaMemcpy(o_host.data(), sets[i].o.get(), qo_bytes, cudaMemcpyDeviceToHost));
    check_finite_output(o_host, qd, what);
  }

  r.gbps = double(r.bytes()) / (r.time.median_us * 1e-6) / 1e9;
  r.pct_read_ceiling = 100.0 * r.gbps / ceil.read_gbps;
  if (has_value(r.read_bound_us))
    r.read_bound_pct = 100.0 * double(r.bytes()) / (r.read_bound_us * 1e-6) / 1e9 / ceil.read_gbps;
  if (has_value(r.graph_read_bound_us))
    r.graph_read_bound_pct = 100.0 * double(r.bytes()) / (r.graph_read_bound_us * 1e-6) / 1e9 / ceil.read_gbps;
  if (has_value(r.graph_us))
    r.graph_pct_read_ceiling = 100.0 * double(r.bytes()) / (r.graph_us * 1e-6) / 1e9 / ceil.read_gbps;
  return r;
}

// ---- Output -----------------------------------------------------------------------------------------------

json device_json(const DeviceInfo& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"total_mem_bytes", d.total_mem_bytes},
          {"sm_clock_khz", d.sm_clock_khz},
          {"mem_clock_khz", d.mem_clock_khz},
          {"mem_bus_bits", d.mem_bus_bits},
          {"theoretical_dram_gbps", d.theoretical_dram_gbps}};
}

json stats_json(const TimeStats& t) {
  return {{"median_us", t.median_us},
          {"min_us", t.min_us},
          {"mean_us", t.mean_us},
          {"max_us", t.max_us},
          {"sm_mhz", t.sm_mhz}};
}

json case_json(const Shape& s, const FormatPair& fp, const AttentionBenchOptions& opts, const CaseResult& r) {
  json j = {{"family", s.family},
            {"key", s.key()},
            {"batch", s.batch},
            {"num_qo_heads", s.num_qo_heads},
            {"num_kv_heads", s.num_kv_heads},
            {"head_dim", s.head_dim},
            {"t_max", s.t_max},
            {"seq_lens", opts.unequal ? "unequal" : "equal"},
            {"sum_seq_len", s.sum_seq_len()},
            {"format", fp.name()},
            {"k_format", fp.k.name()},
            {"v_format", fp.v.name()},
            {"q_dtype", dtype_name(fp.q_dtype())},
            {"page_size", opts.page_size},
            {"cache", r.paged ? "paged" : "contiguous"},
            {"status", r.status}};
  if (opts.unequal) j["seq_lens_list"] = s.seq_lens;
  if (r.status != "ok") {
    j["message"] = r.message;
    return j;
  }
  j.update({{"num_splits", r.num_splits},
            {"cta_warps", r.cta_warps},
            {"workspace_bytes", r.workspace_bytes},
            {"rotation_sets", r.rotation_sets},
            {"set_bytes", r.set_bytes},
            {"iters", opts.iters},
            {"median_us", r.time.median_us},
            {"min_us", r.time.min_us},
            {"mean_us", r.time.mean_us},
            {"max_us", r.time.max_us},
            {"times_us", r.time.times_us},
            {"bytes", r.bytes()},
            {"k_bytes", r.k_bytes},
            {"v_bytes", r.v_bytes},
            {"q_bytes", r.q_bytes},
            {"o_bytes", r.o_bytes},
            {"flops", r.flops},
            {"gbps", r.gbps},
            {"pct_read_ceiling", r.pct_read_ceiling},
            {"speedup_vs_bf16", has_value(r.speedup_vs_bf16) ? json(r.speedup_vs_bf16) : json(nullptr)}});
  if (has_value(r.check_rel_l2)) j["check_rel_l2"] = r.check_rel_l2;
  if (has_value(r.time_vs_contiguous)) j["time_vs_contiguous"] = r.time_vs_contiguous;
  if (has_value(r.graph_us))
    j["graph"] = {{"reps", opts.graph_reps}, {"median_us", r.graph_us}, {"pct_read_ceiling", r.graph_pct_read_ceiling}};
  if (has_value(r.read_bound_us)) {
    j["read_bound"] = {{"median_us", r.read_bound_us}, {"pct_read_ceiling", r.read_bound_pct}};
    if (has_value(r.graph_read_bound_us)) {
      j["read_bound"]["graph_median_us"] = r.graph_read_bound_us;
      j["read_bound"]["graph_pct_read_ceiling"] = r.graph_read_bound_pct;
    }
  }
  if (!r.timeline.empty()) {
    j["timeline"] = json::object();
    for (const auto& [name, us] : r.timeline) j["timeline"][name] = us;
    j["timeline_ctas"] = r.timeline_ctas;
  }
  if (has_value(r.append_us)) {
    j["append"] = {{"median_us", r.append_us},
                   {"bytes", r.append_bytes},
                   {"gbps", r.append_gbps},
                   {"pct_of_decode_step", r.append_pct_of_step},
                   {"step_with_append_us", r.step_with_append_us},
                   {"marginal_pct_of_decode_step", r.append_marginal_pct}};
    if (has_value(r.graph_append_us))
      j["append"]["graph"] = {{"reps", opts.graph_reps},
                              {"append_us", r.graph_append_us},
                              {"step_us", r.graph_step_us},
                              {"step_with_append_us", r.graph_step_with_append_us},
                              {"append_pct_of_step", r.graph_append_pct_of_step},
                              {"marginal_pct_of_step", r.graph_marginal_pct},
                              {"step_with_append_serial_us", r.graph_step_serial_us},
                              {"serial_marginal_pct_of_step", r.graph_serial_marginal_pct}};
  }
  return j;
}

std::string table_row(const std::string& shape, const std::string& format, const std::string& splits,
                      const std::string& median, const std::string& mb, const std::string& gbps, const std::string& pct,
                      const std::string& speedup, const std::string& vs_contig, const std::string& graph_us,
                      const std::string& graph_pct, const std::string& mhz) {
  return fmt::format("{:<32} {:<24} {:>10} {:>11} {:>10} {:>9} {:>9} {:>7} {:>9} {:>9} {:>8} {:>6}\n", shape, format,
                     splits, median, mb, gbps, pct, speedup, vs_contig, graph_us, graph_pct, mhz);
}

int run(const AttentionBenchOptions& opts, std::ostream& out) {
  if (opts.seq_len < 1) throw BenchError(fmt::format("--seq-len: {} must be >= 1", opts.seq_len));
  if (opts.iters < 1) throw BenchError(fmt::format("--iters: {} must be >= 1", opts.iters));
  if (!(opts.cool_ms >= 0.0) || opts.cool_ms > 10000.0)
    throw BenchError(fmt::format("--cool-ms: {} must be in 0..10000", opts.cool_ms));
  if (opts.page_order != "shuffled" && opts.page_order != "sequential")
    throw BenchError(fmt::format("--page-order: '{}' is not shuffled or sequential", opts.page_order));
  if (opts.graph_reps < 0) throw BenchError(fmt::format("--graph-reps: {} must be >= 0", opts.graph_reps));
  if (opts.warmup < 0) throw BenchError(fmt::format("--warmup: {} must be >= 0", opts.warmup));
  if (!(opts.warmup_ms >= 0.0) || opts.warmup_ms > 10000.0)
    throw BenchError(fmt::format("--warmup-ms: {} must be in 0..10000", opts.warmup_ms));
  if (opts.num_splits < 0) throw BenchError(fmt::format("--splits: {} must be >= 0", opts.num_splits));
  if (opts.cta_warps < 0) throw BenchError(fmt::format("--cta-warps: {} must be >= 0", opts.cta_warps));
  if (opts.cache != "contiguous" && opts.cache != "paged" && opts.cache != "both")
    throw BenchError(fmt::format("--cache: '{}' is not contiguous, paged or both", opts.cache));
  if (opts.timeline && !qdec::attention::decode_timeline_built())
    throw BenchError("--timeline needs a library built with -DQDEC_DECODE_TIMELINE=ON (a probe build)");
  if (opts.append && opts.cache == "contiguous")
    throw BenchError("--append appends into a paged pool: use it with --cache paged or --cache both");
  const std::vector<FormatPair> formats = parse_formats(opts.formats);
  const std::vector<Shape> shapes = make_shapes(opts);

  int device_count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&device_count);
  if (count_err != cudaSuccess || device_count == 0) {
    std::cerr << fmt::format("bench attention: no CUDA device available ({}); nothing was measured\n",
                             count_err != cudaSuccess ? cudaGetErrorString(count_err) : "device count is 0");
    cudaGetLastError();
    return 2;
  }
  if (opts.device < 0 || opts.device >= device_count) {
    throw BenchError(fmt::format("--device: {} is not in 0..{}", opts.device, device_count - 1));
  }
  BENCH_CUDA(cudaSetDevice(opts.device));
  const DeviceInfo dev = query_device(opts.device);
  Stream stream;
  HostFlag flag;

  out << fmt::format(
      "device {}: {} (sm_{}{}, {} SMs, L2 {:.1f} MB, {:.1f} GB, SM clock {} MHz, DRAM {:.0f} GB/s "
      "theoretical)\n",
      dev.ordinal, dev.name, dev.cc_major, dev.cc_minor, dev.sm_count, dev.l2_bytes / 1e6, dev.total_mem_bytes / 1e9,
      dev.sm_clock_khz / 1000, dev.theoretical_dram_gbps);
  out.flush();
  const Ceilings ceil = measure_ceilings(dev, stream.get());
  out << fmt::format(
      "ceilings (median of 30): copy {:.0f} GB/s (read+write of {:.2f} GB), read {:.0f} GB/s "
      "(streaming read of {:.2f} GB) <- the '% ceil' column\n",
      ceil.copy_gbps, ceil.copy_bytes / 1e9, ceil.read_gbps, ceil.read_bytes / 1e9);
  const TimeStats launch_floor = time_launches(opts, stream.get(), flag, "empty kernel", [&](int) {
    empty_kernel<<<1, 32, 0, stream.get()>>>();
    return Status::Ok();
  });
  out << fmt::format("launch floor: an empty kernel between the same events takes {:.2f} us (median)\n",
                     launch_floor.median_us);
  out << fmt::format(
      "{} iterations per case after {} ms idle, >= {} warm-up launches and >= {} ms, page size {}, splits {}, warps "
      "{}, lengths {}, cache {}\n\n",
      opts.iters, opts.cool_ms, opts.warmup, opts.warmup_ms, opts.page_size,
      opts.num_splits == 0 ? "auto" : std::to_string(opts.num_splits),
      opts.cta_warps == 0 ? "auto" : std::to_string(opts.cta_warps), opts.unequal ? "random in [T/2, T]" : "all T",
      opts.cache);

  // The JSON is written at the end, or with what was measured so far when a case fails (a GPU run is too
  // costly to lose whole).
  json cases = json::array();
  auto write_json = [&](const std::string& error) {
    if (opts.json_path.empty()) return;
    // One option per line.
    // clang-format off
    json options = {{"formats", opts.formats},
                    {"shapes", opts.shapes},
                    {"batch", opts.batch},
                    {"smollm2_batch", opts.smollm2_batch},
                    {"iters", opts.iters},
                    {"warmup", opts.warmup},
                    {"warmup_ms", opts.warmup_ms},
                    {"cool_ms", opts.cool_ms},
                    {"hold", opts.hold},
                    {"num_splits", opts.num_splits},
                    {"cta_warps", opts.cta_warps},
                    {"page_size", opts.page_size},
                    {"unequal", opts.unequal},
                    {"cache", opts.cache},
                    {"append", opts.append},
                    {"graph", opts.graph},
                    {"graph_reps", opts.graph_reps},
                    {"page_order", opts.page_order},
                    {"check", opts.check},
                    {"seed", opts.seed}};
    // clang-format on
    json ceilings = {{"copy_bytes", ceil.copy_bytes},
                     {"copy", stats_json(ceil.copy)},
                     {"copy_gbps", ceil.copy_gbps},
                     {"read_bytes", ceil.read_bytes},
                     {"read", stats_json(ceil.read)},
                     {"read_gbps", ceil.read_gbps},
                     {"read_grid", {ceil.read_blocks, ceil.read_threads}}};
    json doc = {{"bench", "attention"},
                {"launch_floor_us", launch_floor.median_us},
                {"units", {{"time", "us"}, {"bandwidth", "GB/s (1e9 bytes/s)"}}},
                {"device", device_json(dev)},
                {"ceilings", ceilings},
                {"options", options},
                {"complete", error.empty()},
                {"cases", cases}};
    if (!error.empty()) doc["error"] = error;
    std::ofstream f(opts.json_path);
    f << doc.dump(2) << "\n";
    f.close();
    if (!f) throw BenchError(fmt::format("--json: cannot write {}", opts.json_path));
    out << fmt::format("\nwrote {}{}\n", opts.json_path, error.empty() ? "" : " (incomplete: the run failed)");
  };

  int unsupported = 0;
  try {
    // --check: every (heads, head_dim, format) once on a small problem, before anything is timed.
    std::vector<std::vector<double>> check_err(shapes.size(), std::vector<double>(formats.size(), kNoValue));
    if (opts.check) {
      for (size_t si = 0; si < shapes.size(); ++si) {
        // The check only depends on the heads and head_dim; reuse results across batch sizes and lengths.
        size_t same = si;
        for (size_t sj = 0; sj < si; ++sj) {
          if (shapes[sj].num_qo_heads == shapes[si].num_qo_heads &&
              shapes[sj].num_kv_heads == shapes[si].num_kv_heads && shapes[sj].head_dim == shapes[si].head_dim) {
            same = sj;
            break;
          }
        }
        for (size_t fi = 0; fi < formats.size(); ++fi) {
          if (same != si) {
            check_err[si][fi] = check_err[same][fi];
            continue;
          }
          check_err[si][fi] = check_against_reference(shapes[si], formats[fi], opts, dev, stream.get());
          out << fmt::format("check {}/{}x{} {:<18} {}\n", shapes[si].num_qo_heads, shapes[si].num_kv_heads,
                             shapes[si].head_dim, formats[fi].name(),
                             has_value(check_err[si][fi]) ? fmt::format("rel L2 {:.2e}  ok", check_err[si][fi])
                                                          : std::string("unsupported"));
        }
      }
      out << "\n";
    }

    out << table_row("shape", "format", "splits x w", "median µs", "bytes MB", "GB/s", "% ceil", "x BF16", "t/contig",
                     "graph µs", "% graph", "MHz");
    std::vector<std::string> append_lines, graph_lines, bound_lines, timeline_lines;
    const bool run_contiguous = opts.cache != "paged", run_paged = opts.cache != "contiguous";
    for (size_t si = 0; si < shapes.size(); ++si) {
      const Shape& shape = shapes[si];
      double bf16_us[2] = {kNoValue, kNoValue};  // [contiguous, paged]
      for (size_t fi = 0; fi < formats.size(); ++fi) {
        const FormatPair& fp = formats[fi];
        double contiguous_us = kNoValue;
        for (int paged = 0; paged < 2; ++paged) {
          if (!(paged ? run_paged : run_contiguous)) continue;
          CaseResult r = run_case(shape, fp, opts, dev, ceil, stream.get(), flag, paged != 0);
          r.paged = paged != 0;
          r.check_rel_l2 = check_err[si][fi];
          const std::string name = fp.name() + (paged ? " paged" : "");
          if (r.status != "ok") {
            ++unsupported;
            out << fmt::format("{:<32} {:<24} {}\n", shape.label(), name, r.message);
          } else {
            if (fp.k == KvFormat::bf16() && fp.v == KvFormat::bf16()) bf16_us[paged] = r.time.median_us;
            if (has_value(bf16_us[paged])) r.speedup_vs_bf16 = bf16_us[paged] / r.time.median_us;
            if (!paged) contiguous_us = r.time.median_us;
            if (paged && has_value(contiguous_us)) r.time_vs_contiguous = r.time.median_us / contiguous_us;
            if (has_value(r.append_us)) {
              append_lines.push_back(
                  fmt::format("{:<32} {:<24} {:>9.2f} {:>9.3f} {:>8.1f} {:>10.2f} {:>10.2f} {:>11.2f} "
                              "{:>10.2f}\n",
                              shape.label(), fp.name(), r.append_us, r.append_bytes / 1e6, r.append_gbps,
                              r.time.median_us, r.append_pct_of_step, r.step_with_append_us, r.append_marginal_pct));
              if (has_value(r.graph_append_us))
                graph_lines.push_back(
                    fmt::format("{:<32} {:<24} {:>9.2f} {:>10.2f} {:>10.2f} {:>11.2f} {:>10.2f} {:>11.2f} {:>10.2f}\n",
                                shape.label(), fp.name(), r.graph_append_us, r.graph_step_us,
                                r.graph_append_pct_of_step, r.graph_step_with_append_us, r.graph_marginal_pct,
                                r.graph_step_serial_us, r.graph_serial_marginal_pct));
            }
            if (!r.timeline.empty()) {
              std::string line = fmt::format("{:<32} {:<24} {:>8.2f} |", shape.label(), name, r.time.median_us);
              for (const auto& [col, v] : r.timeline) line += fmt::format(" {} {:.2f}", col, v);
              timeline_lines.push_back(line + "\n");
            }
            if (has_value(r.read_bound_us)) {
              std::string line = fmt::format("{:<32} {:<24} {:>9.2f} {:>8.1f}% {:>9.2f} {:>8.1f}% {:>9.3f}",
                                             shape.label(), name, r.time.median_us, r.pct_read_ceiling, r.read_bound_us,
                                             r.read_bound_pct, r.time.median_us / r.read_bound_us);
              if (has_value(r.graph_read_bound_us))
                line += fmt::format(" {:>9.2f} {:>8.1f}% {:>9.2f} {:>8.1f}%", r.graph_us, r.graph_pct_read_ceiling,
                                    r.graph_read_bound_us, r.graph_read_bound_pct);
              bound_lines.push_back(line + "\n");
            }
            out << table_row(shape.label(), name, fmt::format("{}x{}", r.num_splits, r.cta_warps),
                             fmt::format("{:.2f}", r.time.median_us), fmt::format("{:.2f}", r.bytes() / 1e6),
                             fmt::format("{:.1f}", r.gbps), fmt::format("{:.1f}", r.pct_read_ceiling),
                             has_value(r.speedup_vs_bf16) ? fmt::format("{:.2f}", r.speedup_vs_bf16) : "-",
                             has_value(r.time_vs_contiguous) ? fmt::format("{:.3f}", r.time_vs_contiguous) : "-",
                             has_value(r.graph_us) ? fmt::format("{:.2f}", r.graph_us) : "-",
                             has_value(r.graph_us) ? fmt::format("{:.1f}", r.graph_pct_read_ceiling) : "-",
                             fmt::format("{:.0f}", r.time.sm_mhz));
          }
          out.flush();
          cases.push_back(case_json(shape, fp, opts, r));
        }
      }
    }
    if (!bound_lines.empty()) {
      out << "\nread bound: the read ceiling's kernel over each case's K and V bytes (its own rotated buffers), "
             "timed the same way; its % is the most any kernel reading those bytes could show here:\n";
      out << fmt::format("{:<32} {:<24} {:>9} {:>9} {:>9} {:>9} {:>9}", "shape", "format", "median µs", "% ceil",
                         "read µs", "% bound", "t / read")
          << (opts.graph && opts.graph_reps > 0
                  ? fmt::format(" {:>9} {:>9} {:>9} {:>9}", "graph µs", "% graph", "g read µs", "% g bound")
                  : std::string())
          << "\n";
      for (const std::string& line : bound_lines) out << line;
    }
    if (!timeline_lines.empty()) {
      out << fmt::format(
          "\ntimeline: {} samples per case, each the last of {} back-to-back calls; medians "
          "over the samples of each phase's quantile over the CTAs, µs from the call's first CTA entry (ctas / merge "
          "ctas: counts; m: the split merge's CTAs; src/attention/decode_timeline.h):\n",
          kTimelineCalls, kTimelineRun);
      out << fmt::format("{:<32} {:<24} {:>8}\n", "shape", "format", "timed µs");
      for (const std::string& line : timeline_lines) out << line;
    }
    if (!append_lines.empty()) {
      out << "\nfused append (RoPE + quantize + paged write) of one new token per sequence: alone, and as part of the "
             "step (append, then paged attention as its programmatic dependent):\n";
      out << fmt::format("{:<32} {:<24} {:>9} {:>9} {:>8} {:>10} {:>10} {:>11} {:>10}\n", "shape", "format",
                         "append µs", "bytes MB", "GB/s", "step µs", "% of step", "step+app µs", "marginal %");
      for (const std::string& line : append_lines) out << line;
    }
    if (!graph_lines.empty()) {
      out << fmt::format(
          "\nthe same, per step of a CUDA graph of {} decode steps (graphs replayed in turn; no per-launch event "
          "floor):\n",
          opts.graph_reps);
      out << "(pdl: the attention as the append's programmatic dependent; serial: plain stream order)\n";
      out << fmt::format("{:<32} {:<24} {:>9} {:>10} {:>10} {:>11} {:>10} {:>11} {:>10}\n", "shape", "format",
                         "append µs", "step µs", "% of step", "pdl µs", "pdl marg %", "serial µs", "serial m %");
      for (const std::string& line : graph_lines) out << line;
    }
  } catch (const std::exception& e) {
    write_json(e.what());
    throw;
  }
  write_json("");
  // A pair the library reports Unsupported (today int4-g8 at head_dim 64, which it does not compile) is a
  // documented limit, not a failure: its row, the JSON and this line say so.
  if (unsupported > 0) {
    out << fmt::format("\n{} case(s) unsupported by the library (rows above; status \"unsupported\" in the JSON)\n",
                       unsupported);
  }
  return 0;
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& opts, std::ostream& table_out) {
  try {
    return run(opts, table_out);
  } catch (const std::exception& e) {
    table_out.flush();
    std::cerr << "bench attention: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace qdec::bench
