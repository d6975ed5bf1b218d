// CPU building blocks of the reference forward (src/model/llama.cpp): a persistent thread pool, an fp32 GEMM
// (OpenBLAS when CMake found it, otherwise a blocked, vectorizable kernel of our own) and the elementwise
// pieces (RMSNorm, RoPE, SwiGLU, softmax). Internal header: the tests include it to check each piece against
// hand-computed values.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qdec::cpu {

// A fixed set of worker threads; parallel_for splits [0, n) into contiguous chunks, one per thread (the
// calling thread takes the first chunk). Not reentrant: one parallel_for at a time.
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }
  // fn(begin, end) on disjoint chunks covering [0, n); chunks are multiples of `grain` except the last.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker(int index);

  int num_threads_ = 1;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// C[M x N] = A[M x K] * op(B): op(B) = B^T with B stored [N x K] (trans_b, the weight layout), or B stored
// [K x N]. Row-major with leading dimensions; C is overwritten (beta = 0).
void sgemm(ThreadPool& pool, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float* C, int ldc);
// The builtin kernel alone (what sgemm runs without OpenBLAS, or with QDEC_GEMM=builtin in the environment).
void sgemm_builtin(ThreadPool& pool, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
                   int ldb, float* C, int ldc);
// Selects the builtin kernel at run time (true) or the default (OpenBLAS when linked); QDEC_GEMM=builtin in the
// environment sets the initial choice.
void use_builtin_gemm(bool builtin);
// "openblas 0.3.21 (pthread)" or "builtin (blocked, avx512f)" and the like.
const char* gemm_backend_name();
// Limits the BLAS library's own threads (no-op for the builtin GEMM, which uses the pool).
void set_gemm_threads(int num_threads);

// out = x / sqrt(mean(x^2) + eps) * w, n values (in place allowed).
void rms_norm(const float* x, const float* w, int n, float eps, float* out);

// How a head's dimensions are paired for rotation. kAdjacent rotates (2i, 2i+1) -- ggml's "normal" mode, the
// one GGUF llama files need (the converter permutes the q/k weights for it); kHalves rotates (i, i + d/2)
// (GPT-NeoX / Hugging Face layout). Pair i turns by pos * theta^(-2i/d) in both.
enum class RopeStyle { kAdjacent, kHalves };
const char* rope_style_name(RopeStyle style);
// The dimension rotated together with `dim`.
inline int rope_partner(RopeStyle style, int head_dim, int dim) {
  return style == RopeStyle::kAdjacent ? (dim ^ 1) : (dim < head_dim / 2 ? dim + head_dim / 2 : dim - head_dim / 2);
}
// Rotate one head vector x[head_dim] in place; cs holds (cos, sin) for the head_dim/2 pairs at its position.
void rope_apply(RopeStyle style, int head_dim, const float* cs, float* x);
// cs[2 * i], cs[2 * i + 1] = cos, sin of pos * theta^(-2i/head_dim), i < head_dim/2 (angles in double).
void rope_table(int head_dim, float theta, int64_t pos, float* cs);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void swiglu(const float* gate, const float* up, int n, float* out);

// In place; returns the log of the normalizer (max + log sum exp(x - max)).
double softmax_inplace(float* x, int n);

}  // namespace qdec::cpu
