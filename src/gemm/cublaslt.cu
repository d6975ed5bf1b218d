// cuBLASLt 16-bit GEMM with cached handle, descriptors and algorithm (see cublaslt.h).
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "gemm/cublaslt.h"
#include "runtime/cuda_check.h"

namespace qdec::wq {
namespace {

Status lt_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + " failed: cublasStatus " + std::to_string(int(s)));
}
#define QDEC_LT_RETURN(call) QDEC_RETURN_IF_ERROR(lt_status((call), #call))

cudaDataType_t d_type(int d_dtype) {
  return d_dtype == 0 ? CUDA_R_16BF : d_dtype == 1 ? CUDA_R_16F : CUDA_R_32F;
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t ws_needed = 0;
};

// device, dtypes, shape, leading dimensions, workspace, pointer alignments (x, w, d).
using Key = std::tuple<int, bool, int, int, int, int, long long, long long, size_t, uint32_t, uint32_t, uint32_t>;

// The largest power of two (<= 256) dividing the address: cuBLASLt picks kernels for the alignment it is told.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

std::mutex g_mu;
std::map<int, cublasLtHandle_t> g_handles;
std::map<Key, Plan> g_plans;

Status make_plan(cublasLtHandle_t h, bool a_bf16, int d_dtype, int m, int n, int k, long long ldx, long long ldd,
                 size_t ws_bytes, uint32_t al_x, uint32_t al_w, uint32_t al_d, Plan* plan) {
  const cudaDataType_t ab = a_bf16 ? CUDA_R_16BF : CUDA_R_16F;
  QDEC_LT_RETURN(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: D^T (n x m, ld ldd) = W (n x k) . X^T (k x m); W^T is stored k x n with ld k.
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  QDEC_LT_RETURN(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  QDEC_LT_RETURN(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  QDEC_LT_RETURN(cublasLtMatrixLayoutCreate(&plan->a, ab, k, n, k));
  QDEC_LT_RETURN(cublasLtMatrixLayoutCreate(&plan->b, ab, k, m, ldx));
  QDEC_LT_RETURN(cublasLtMatrixLayoutCreate(&plan->d, d_type(d_dtype), n, m, ldd));
  cublasLtMatmulPreference_t pref = nullptr;
  QDEC_LT_RETURN(cublasLtMatmulPreferenceCreate(&pref));
  QDEC_LT_RETURN(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof(ws_bytes)));
  // cuBLASLt's A is W, its B is X.
  QDEC_LT_RETURN(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, sizeof(al_w)));
  QDEC_LT_RETURN(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_x, sizeof(al_x)));
  QDEC_LT_RETURN(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
  QDEC_LT_RETURN(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  QDEC_LT_RETURN(st);
  if (found < 1)
    return Status(StatusCode::kUnsupported, "cuBLASLt has no algorithm for m " + std::to_string(m) + " n " +
                                                std::to_string(n) + " k " + std::to_string(k));
  plan->algo = res.algo;
  plan->ws_needed = res.workspaceSize;
  return Status::Ok();
}

}  // namespace

Status cublaslt_gemm(bool a_bf16, int d_dtype, int m, int n, int k, const void* x, long long ldx, const void* w,
                     void* d, long long ldd, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  const Plan* plan = nullptr;
  cublasLtHandle_t h = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto hit = g_handles.find(dev);
    if (hit == g_handles.end()) {
      QDEC_LT_RETURN(cublasLtCreate(&h));
      g_handles[dev] = h;
    } else {
      h = hit->second;
    }
    const uint32_t al_x = alignment_of(x), al_w = alignment_of(w), al_d = alignment_of(d);
    const Key key{dev, a_bf16, d_dtype, m, n, k, ldx, ldd, workspace_bytes, al_x, al_w, al_d};
    auto it = g_plans.find(key);
    if (it == g_plans.end()) {
      Plan pl;
      QDEC_RETURN_IF_ERROR(make_plan(h, a_bf16, d_dtype, m, n, k, ldx, ldd, workspace_bytes, al_x, al_w, al_d, &pl));
      it = g_plans.emplace(key, pl).first;
    }
    plan = &it->second;
  }
  const float alpha = 1.0f, beta = 0.0f;
  QDEC_LT_RETURN(cublasLtMatmul(h, plan->desc, &alpha, w, plan->a, x, plan->b, &beta, d, plan->d, d, plan->d,
                                &plan->algo, workspace, workspace_bytes, stream));
  return Status::Ok();
}

}  // namespace qdec::wq
