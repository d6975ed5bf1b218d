// The timing harness of the GEMM-family benchmarks (bench_gemm, bench_int8): each case's launches are
// enqueued behind a host-released hold kernel, each between its own pair of events, followed by a clock probe
// (the SM clock the batch ran at); optionally a CUDA graph of back-to-back launches. Included by the .cu
// benchmark sources after bench_common.cuh.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "bench_common.cuh"

namespace qdec::bench {
// Internal to each benchmark source that includes it, as these pieces were before they were shared (the kernels
// and the class are per translation unit, so two benchmarks linked into one binary cannot collide).
namespace {

__global__ void hold_kernel(volatile int* flag, uint64_t timeout_ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (flag[0] == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) break;
    __nanosleep(1000);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `launch(i)` (i = rotation index) iters times behind a host-released hold; returns the median in µs.
class Timer {
 public:
  Timer(cudaStream_t s, int max_iters) : s_(s) {
    BENCH_CUDA(cudaHostAlloc(&flag_, 2 * sizeof(int), cudaHostAllocMapped));
    BENCH_CUDA(cudaHostGetDevicePointer(&dflag_, flag_, 0));
    ev_.resize(2 * size_t(max_iters));
    for (auto& e : ev_) BENCH_CUDA(cudaEventCreate(&e));
    for (auto& e : probe_) BENCH_CUDA(cudaEventCreate(&e));
  }
  ~Timer() {
    for (auto& e : ev_) cudaEventDestroy(e);
    for (auto& e : probe_) cudaEventDestroy(e);
    cudaFreeHost(flag_);
  }
  // warm_ms > 0: before the timed batch, keep the GPU busy with the case itself for that long (host clock).
  void set_warm_ms(double ms) { warm_ms_ = ms; }
  // cool_ms > 0: before a case's first launch, leave the GPU idle this long (host sleep after a synchronize), so
  // that its clock does not depend on the power the cases before it drew. Applied before the warm-up.
  void set_cool_ms(double ms) { cool_ms_ = ms; }
  // SM clock (MHz) read by the clock probe right after the last timed batch.
  double last_sm_mhz() const { return last_mhz_; }

  // Back-to-back launches as a decode step issues them: `reps` launches (rotation indices 0..reps-1) captured
  // into one CUDA graph; the graph is replayed `iters` times, each replay between its own events; returns the
  // median replay time / reps in µs. No per-launch event pair, so the ~3 µs event-timing floor of time() is
  // not in it.
  template <class F>
  double time_graph(int reps, int iters, F&& launch) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    BENCH_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) launch(i);
    BENCH_CUDA(cudaStreamEndCapture(s_, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    BENCH_CUDA(cudaGraphLaunch(exec, s_));
    BENCH_CUDA(cudaStreamSynchronize(s_));
    std::vector<double> us(iters);
    for (int i = 0; i < iters; ++i) {
      BENCH_CUDA(cudaEventRecord(ev_[0], s_));
      BENCH_CUDA(cudaGraphLaunch(exec, s_));
      BENCH_CUDA(cudaEventRecord(ev_[1], s_));
      BENCH_CUDA(cudaEventSynchronize(ev_[1]));
      float ms = 0.f;
      BENCH_CUDA(cudaEventElapsedTime(&ms, ev_[0], ev_[1]));
      us[i] = 1e3 * ms / reps;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return median(us);
  }

  template <class F>
  double time(int warmup, int iters, F&& launch) {
    if (cool_ms_ > 0) {
      BENCH_CUDA(cudaStreamSynchronize(s_));
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(cool_ms_));
    }
    for (int i = 0; i < warmup; ++i) launch(i);
    BENCH_CUDA(cudaStreamSynchronize(s_));
    keep_busy_until(s_, std::chrono::steady_clock::now(), warm_ms_, 8, launch);
    flag_[0] = 0;
    hold_kernel<<<1, 1, 0, s_>>>(dflag_, 2000000000ull);
    BENCH_CUDA(cudaGetLastError());
    for (int i = 0; i < iters; ++i) {
      BENCH_CUDA(cudaEventRecord(ev_[2 * i], s_));
      launch(warmup + i);
      BENCH_CUDA(cudaEventRecord(ev_[2 * i + 1], s_));
    }
    constexpr long long kProbeCycles = 200000;
    BENCH_CUDA(cudaEventRecord(probe_[0], s_));
    clock_probe_kernel<<<1, 1, 0, s_>>>(kProbeCycles);
    BENCH_CUDA(cudaEventRecord(probe_[1], s_));
    flag_[0] = 1;
    BENCH_CUDA(cudaStreamSynchronize(s_));
    float probe_ms = 0.f;
    BENCH_CUDA(cudaEventElapsedTime(&probe_ms, probe_[0], probe_[1]));
    last_mhz_ = probe_ms > 0.f ? kProbeCycles / (1e3 * probe_ms) : 0.0;
    std::vector<double> us(iters);
    for (int i = 0; i < iters; ++i) {
      float ms = 0.f;
      BENCH_CUDA(cudaEventElapsedTime(&ms, ev_[2 * i], ev_[2 * i + 1]));
      us[i] = 1e3 * ms;
    }
    return median(us);
  }

 private:
  cudaStream_t s_;
  int* flag_ = nullptr;
  int* dflag_ = nullptr;
  std::vector<cudaEvent_t> ev_;
  cudaEvent_t probe_[2] = {nullptr, nullptr};
  double warm_ms_ = 0.0;
  double cool_ms_ = 0.0;
  double last_mhz_ = 0.0;
};

}  // namespace
}  // namespace qdec::bench
