// Pieces every qdec benchmark shares (included by the .cu benchmark sources, inside no namespace): the error
// type and checks, the streaming-read kernel behind the "% of ceiling" columns (one kernel, so every benchmark
// measures the same ceiling), the empty kernel behind the launch floor, list parsing for options, the device
// buffer, the hash of the random fills and the time-based warm-up.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qdec/status.h"

namespace qdec::bench {

// Any failure (CUDA, qdec Status, bad option) ends a run with a message; the caller maps it to exit code 1.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) {
    throw BenchError(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " + cudaGetErrorName(e) +
                     " (" + cudaGetErrorString(e) + ")");
  }
}
#define BENCH_CUDA(expr) ::qdec::bench::check_cuda((expr), #expr, __FILE__, __LINE__)

inline void check_status(const Status& s, std::string_view what) {
  if (!s.ok()) throw BenchError(std::string(what) + ": " + s.to_string());
}

// Idle time before a case (`--cool-ms`). Cases of M >= 1024 are compute-bound and run into the card's power cap:
// timed right after another such case they inherit its lowered SM clock, so their speedup depended on the order of
// the rows (docs/int8_gemm.md, "Session 45"). A negative option is the default: 250 ms of idle before each case of
// M >= 1024 (measured enough for the clock to recover on the H200), none below; >= 0 applies to every case.
constexpr int kAutoCoolMinM = 1024;
constexpr double kAutoCoolMs = 250.0;
inline double cool_ms_for(double option, int m) {
  return option >= 0 ? option : (m >= kAutoCoolMinM ? kAutoCoolMs : 0.0);
}
inline std::string cool_ms_note(double option) {
  return option >= 0 ? std::to_string(int(option)) + " ms of idle before every case"
                     : std::to_string(int(kAutoCoolMs)) +
                           " ms of idle before every case of M >= " + std::to_string(kAutoCoolMinM);
}

// A device buffer (cudaMalloc'd, freed with the object, movable) for a benchmark's inputs and outputs.
class Buf {
 public:
  Buf() = default;
  explicit Buf(size_t bytes) : bytes_(bytes) {
    if (bytes) BENCH_CUDA(cudaMalloc(&p_, bytes));
  }
  ~Buf() {
    if (p_) cudaFree(p_);
  }
  Buf(Buf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_) {}
  Buf(const Buf&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// splitmix64 finalizer: the hash behind every benchmark's random fill kernels and seeds.
__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 24 bits.
__device__ inline float unit_float(uint32_t r) {
  return float(r >> 8) * (1.0f / 16777216.0f);
}

// The read ceiling: a pure streaming read. Four independent 16-byte loads per thread per iteration keep
// enough bytes in flight that DRAM, not load latency, is the limit. The xor of everything read is stored
// only on an impossible-to-prove-false condition, so the loads cannot be removed and nothing is written.
static __global__ void __launch_bounds__(512)
    read_stream_kernel(const uint4* __restrict__ src, uint64_t n, uint32_t* __restrict__ sink) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(src + i);
    const uint4 b = __ldg(src + i + stride);
    const uint4 c = __ldg(src + i + 2 * stride);
    const uint4 d = __ldg(src + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldg(src + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

// The read ceiling's kernel over two buffers in one launch (a KV cache's K and V): the same four 16-byte loads per
// thread per iteration, over the index space of both (a first, then b). With kStamp (`bench_gemm --timeline`),
// lane 0 of every warp records %globaltimer at entry and exit into tl[warp][2] (warps past max_warps record nothing).
template <bool kStamp>
__device__ __forceinline__ void read_two_stream_body(const uint4* __restrict__ a, uint64_t na,
                                                     const uint4* __restrict__ b, uint64_t nb,
                                                     uint32_t* __restrict__ sink, unsigned long long* tl,
                                                     int max_warps) {
  const int tl_warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const bool stamp = kStamp && threadIdx.x % 32 == 0 && tl_warp < max_warps;
  if (stamp) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tl[2 * tl_warp]));
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x, n = na + nb;
  uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  auto at = [&](uint64_t j) { return j < na ? __ldg(a + j) : __ldg(b + (j - na)); };
  uint32_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 p = at(i), q = at(i + stride), r = at(i + 2 * stride), t = at(i + 3 * stride);
    acc ^= p.x ^ p.y ^ p.z ^ p.w ^ q.x ^ q.y ^ q.z ^ q.w ^ r.x ^ r.y ^ r.z ^ r.w ^ t.x ^ t.y ^ t.z ^ t.w;
  }
  for (; i < n; i += stride) {
    const uint4 p = at(i);
    acc ^= p.x ^ p.y ^ p.z ^ p.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
  if (stamp) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tl[2 * tl_warp + 1]));
}
static __global__ void __launch_bounds__(512)
    read_two_stream_kernel(const uint4* __restrict__ a, uint64_t na, const uint4* __restrict__ b, uint64_t nb,
                           uint32_t* __restrict__ sink) {
  read_two_stream_body<false>(a, na, b, nb, sink, nullptr, 0);
}
static __global__ void __launch_bounds__(512)
    read_two_stream_tl_kernel(const uint4* __restrict__ a, uint64_t na, const uint4* __restrict__ b, uint64_t nb,
                              uint32_t* __restrict__ sink, unsigned long long* tl, int max_warps) {
  read_two_stream_body<true>(a, na, b, nb, sink, tl, max_warps);
}

// Blocks of `threads` threads (no dynamic shared memory) that fill every SM with `kernel`: the grid of the streaming
// kernels above.
template <class Kernel>
int full_grid_blocks(Kernel kernel, int threads, int sm_count) {
  int per_sm = 0;
  BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return std::max(1, per_sm) * sm_count;
}

// The floor of any timed launch: an empty kernel between the same pair of events.
static __global__ void empty_kernel() {}

// One thread spins for `cycles` SM clock cycles: timed with events right after a batch, it reads the SM clock
// the batch ran at (the card's clocks are never changed; short batches can run before the clock ramps up).
static __global__ void clock_probe_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Random bytes (a splitmix64 hash of the word index and seed) and a repeated word: inputs for timing-only runs.
static __global__ void fill_random_words(uint32_t* p, size_t words, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    p[i] = uint32_t(z ^ (z >> 31));
  }
}
static __global__ void fill_same_word(uint32_t* p, size_t words, uint32_t v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

inline std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The q-quantile (0 = min, 1 = max) of v by nearest rank; 0 for an empty v (the --timeline probes' summaries).
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[size_t(q * double(v.size() - 1) + 0.5)];
}

// Non-empty trimmed items of a `sep`-separated list.
inline std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    size_t end = s.find(sep, begin);
    if (end == std::string::npos) end = s.size();
    std::string item = trim(s.substr(begin, end - begin));
    if (!item.empty()) out.push_back(item);
    begin = end + 1;
  }
  return out;
}

// Keeps the GPU busy with the case itself until `ms` of host time have passed since `start`: batches of `batch`
// launches (launch(i), i counting up for the rotation), each followed by a stream synchronize, so the timed
// launches after it run at the clock a busy GPU holds rather than during its ramp-up.
template <class F>
void keep_busy_until(cudaStream_t stream, std::chrono::steady_clock::time_point start, double ms, int batch,
                     F&& launch) {
  int i = 0;
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < ms) {
    for (int j = 0; j < batch; ++j) launch(i++);
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(stream));
  }
}

}  // namespace qdec::bench
