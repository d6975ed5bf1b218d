// CPU pieces of the reference forward: thread pool, fp32 GEMM (OpenBLAS or builtin), RMSNorm, RoPE, SwiGLU,
// softmax. See cpu_ops.h.
#include "model/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#ifdef QDEC_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace qdec::cpu {

// ---- thread pool ------------------------------------------------------------------------------------------
ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n, chunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
    }
    const int64_t begin = std::min(n, chunk * index), end = std::min(n, begin + chunk);
    if (begin < end) (*job)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  if (num_threads_ == 1 || units == 1) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (units + num_threads_ - 1) / num_threads_ * grain;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  fn(0, std::min(n, chunk));
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [&] { return pending_ == 0; });
}

// ---- GEMM -------------------------------------------------------------------------------------------------
namespace {

constexpr int kLanes = 16;  // accumulator width: one AVX-512 register, two AVX2 ones

// C[MR x NR] = A[MR rows] . B[NR rows]^T over K: MR x NR dot products vectorized along K. Every product is
// summed in one canonical order whatever MR, NR, M or N: value k goes to lane k % 16 (the tail too), the lanes
// are added in order at the end. So a row of C does not depend on the batch it was computed in, and zero terms
// past the end (the masked keys of attention) leave it unchanged: a window of tokens then gives bit for bit what
// token-by-token decoding gives (SmolLM2.WindowEqualsTokenByTokenDecode). target_clones builds AVX-512 and AVX2
// versions beside the baseline one and picks at load time, so the binary stays portable.
template <int MR, int NR>
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void dot_block(int K, const float* A,
                                                                                             int lda, const float* B,
                                                                                             int ldb, float* C,
                                                                                             int ldc) {
  float acc[MR][NR][kLanes] = {};
  const int k_vec = K / kLanes * kLanes;
  for (int k = 0; k < k_vec; k += kLanes) {
    for (int i = 0; i < MR; ++i) {
      const float* a = A + size_t(i) * lda + k;
      for (int j = 0; j < NR; ++j) {
        const float* b = B + size_t(j) * ldb + k;
        for (int l = 0; l < kLanes; ++l) acc[i][j][l] += a[l] * b[l];
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      for (int k = k_vec; k < K; ++k) acc[i][j][k - k_vec] += A[size_t(i) * lda + k] * B[size_t(j) * ldb + k];
      float s = 0.0f;
      for (int l = 0; l < kLanes; ++l) s += acc[i][j][l];
      C[size_t(i) * ldc + j] = s;
    }
  }
}

// Columns [n0, n1) of C = A . B^T (B is [N x K]). A is walked in tiles of kMTile rows so a tile stays in L2
// while the B rows of the range stream past it.
void builtin_nt_range(int M, int n0, int n1, int K, const float* A, int lda, const float* B, int ldb, float* C,
                      int ldc) {
  constexpr int kMTile = 64;
  const int n_vec = n0 + (n1 - n0) / 4 * 4;
  for (int m0 = 0; m0 < M; m0 += kMTile) {
    const int m1 = std::min(M, m0 + kMTile);
    for (int n = n0; n < n_vec; n += 4) {
      const float* b = B + size_t(n) * ldb;
      int m = m0;
      for (; m + 4 <= m1; m += 4) {
        dot_block<4, 4>(K, A + size_t(m) * lda, lda, b, ldb, C + size_t(m) * ldc + n, ldc);
      }
      for (; m < m1; ++m) dot_block<1, 4>(K, A + size_t(m) * lda, lda, b, ldb, C + size_t(m) * ldc + n, ldc);
    }
    for (int n = n_vec; n < n1; ++n) {
      for (int m = m0; m < m1; ++m) {
        dot_block<1, 1>(K, A + size_t(m) * lda, lda, B + size_t(n) * ldb, ldb, C + size_t(m) * ldc + n, ldc);
      }
    }
  }
}

}  // namespace

void sgemm_builtin(ThreadPool& pool, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
                   int ldb, float* C, int ldc) {
  std::vector<float> bt;
  if (!trans_b) {  // B is [K x N]: transpose once so every product is a contiguous dot product.
    bt.resize(size_t(N) * K);
    pool.parallel_for(N, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j)
        for (int k = 0; k < K; ++k) bt[size_t(j) * K + k] = B[size_t(k) * ldb + j];
    });
    B = bt.data();
    ldb = K;
  }
  // Split N (weights' output rows) across threads when it is wide, M otherwise.
  if (N >= 4 * pool.size() * 4) {
    pool.parallel_for(
        N, [&](int64_t n0, int64_t n1) { builtin_nt_range(M, int(n0), int(n1), K, A, lda, B, ldb, C, ldc); }, 4);
  } else {
    pool.parallel_for(M, [&](int64_t m0, int64_t m1) {
      builtin_nt_range(int(m1 - m0), 0, N, K, A + size_t(m0) * lda, lda, B, ldb, C + size_t(m0) * ldc, ldc);
    });
  }
}

namespace {
// QDEC_GEMM=builtin selects the builtin kernel even where OpenBLAS is linked (for comparisons).
std::atomic<bool>& builtin_selected() {
  static std::atomic<bool> yes = [] {
    const char* e = std::getenv("QDEC_GEMM");
    return e != nullptr && std::string(e) == "builtin";
  }();
  return yes;
}
bool force_builtin() {
  return builtin_selected().load(std::memory_order_relaxed);
}
}  // namespace

void use_builtin_gemm(bool builtin) {
  builtin_selected().store(builtin);
}

void sgemm(ThreadPool& pool, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
#ifdef QDEC_HAVE_OPENBLAS
  if (!force_builtin()) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
                C, ldc);
    return;
  }
#endif
  sgemm_builtin(pool, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

const char* gemm_backend_name() {
#ifdef QDEC_HAVE_OPENBLAS
  static const std::string blas = std::string("OpenBLAS (") + openblas_get_config() + ")";
  if (!force_builtin()) return blas.c_str();
#endif
  static const std::string builtin = [] {
    __builtin_cpu_init();
    const char* isa = __builtin_cpu_supports("avx512f") ? "avx512"
                      : __builtin_cpu_supports("avx2")  ? "avx2"
                                                        : "baseline";
    return std::string("builtin blocked GEMM (") + isa + ")";
  }();
  return builtin.c_str();
}

void set_gemm_threads(int num_threads) {
#ifdef QDEC_HAVE_OPENBLAS
  openblas_set_num_threads(std::max(1, num_threads));
#else
  (void)num_threads;
#endif
}

// ---- elementwise pieces -----------------------------------------------------------------------------------
void rms_norm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float r = float(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
}

const char* rope_style_name(RopeStyle style) {
  return style == RopeStyle::kAdjacent ? "adjacent" : "halves";
}

void rope_table(int head_dim, float theta, int64_t pos, float* cs) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(double(theta), -2.0 * i / head_dim);
    const double angle = double(pos) * freq;
    cs[2 * i] = float(std::cos(angle));
    cs[2 * i + 1] = float(std::sin(angle));
  }
}

void rope_apply(RopeStyle style, int head_dim, const float* cs, float* x) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const int a = style == RopeStyle::kAdjacent ? 2 * i : i;
    const int b = style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

void swiglu(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

double softmax_inplace(float* x, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
  return double(mx) + std::log(sum);
}

}  // namespace qdec::cpu
