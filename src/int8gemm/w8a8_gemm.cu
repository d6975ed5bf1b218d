// W8A8 per output channel (qdec/w8a8_gemm.h): Y[M, N] = fp32(Xq . Wq^T) * s_x[m] * s_w[n] (+ bias[n]).
//
//   Xq [M, ldq] int8 (per token), Wq [N, ldw] int8 (per channel), both K-contiguous; Y [M, ldy] bf16/fp16/fp32.
//
// kMma kernel: a CTA (8 warps) owns 32 output channels x 16 * kMT rows of M and one split of K. Each warp walks
// 128-byte K chunks (warp w takes chunks w, w + 8, ...), loading two 16-byte pieces per lane of every weight row
// and activation row straight into registers (no shared memory: each weight byte is used once per M slice; the
// piece pair of 4 lanes covers a whole 128-byte line), kU chunks in flight, and feeds mma.m16n8k32.s8: the 16
// bytes of a piece fill the same k slots of A and B in two k-steps, a permutation of K that the dot product does
// not see. The 8 warps' int32 tiles are summed by shared
// atomics (exact); with split-K, by global int32 atomics in the workspace and the last CTA of a tile (a counter)
// applies the epilogue and zeroes the tile again. Integer sums make every order give the same bits.
// kCublasLt: cuBLASLt IMMA -> int32 [M, N] in the workspace, then the same epilogue in its own kernel.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "int8gemm/w8a8_common.cuh"
#include "int8gemm/w8a8_cublaslt.h"
#include "int8gemm/w8a8_wgmma.h"
#include "qdec/int8_quant.h"
#include "qdec/w8a8_gemm.h"
#include "runtime/cuda_check.h"
#include "runtime/ptx.cuh"

namespace qdec {

const char* w8a8_backend_name(W8A8Backend b) {
  switch (b) {
    case W8A8Backend::kAuto:
      return "auto";
    case W8A8Backend::kMma:
      return "mma";
    case W8A8Backend::kCublasLt:
      return "cublaslt";
    case W8A8Backend::kWgmma:
      return "wgmma";
  }
  return "?";
}

namespace w8a8 {
namespace {

// ---- cuBLASLt ----------------------------------------------------------------------------------------------------

Status lt_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + " failed: cublasStatus " + std::to_string(int(s)));
}
#define W8A8_LT_RETURN(call) QDEC_RETURN_IF_ERROR(lt_status((call), #call))

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
using LtKey = std::tuple<int, int, int, int, long long, long long, long long, size_t>;
std::mutex g_lt_mu;
std::map<int, cublasLtHandle_t> g_lt_handles;
std::map<LtKey, LtPlan> g_lt_plans;

Status make_lt_plan(cublasLtHandle_t h, int m, int n, int k, long long ldx, long long ldw, long long ldd,
                    size_t ws_bytes, LtPlan* plan) {
  W8A8_LT_RETURN(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  // Column-major view: D^T (n x m, ld ldd) = W (stored k x n, ld ldw)^T . X^T (k x m, ld ldx).
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  W8A8_LT_RETURN(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  W8A8_LT_RETURN(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  W8A8_LT_RETURN(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8I, k, n, ldw));
  W8A8_LT_RETURN(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8I, k, m, ldx));
  W8A8_LT_RETURN(cublasLtMatrixLayoutCreate(&plan->d, CUDA_R_32I, n, m, ldd));
  cublasLtMatmulPreference_t pref = nullptr;
  W8A8_LT_RETURN(cublasLtMatmulPreferenceCreate(&pref));
  W8A8_LT_RETURN(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  W8A8_LT_RETURN(st);
  if (found < 1)
    return Status(StatusCode::kUnsupported, "cuBLASLt has no int8 algorithm for M " + std::to_string(m) + " N " +
                                                std::to_string(n) + " K " + std::to_string(k));
  plan->algo = res.algo;
  return Status::Ok();
}

}  // namespace

Status cublaslt_s8_gemm(int m, int n, int k, const int8_t* x, long long ldx, const int8_t* w, long long ldw, int32_t* d,
                        long long ldd, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  cublasLtHandle_t h = nullptr;
  const LtPlan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_lt_mu);
    auto hit = g_lt_handles.find(dev);
    if (hit == g_lt_handles.end()) {
      W8A8_LT_RETURN(cublasLtCreate(&h));
      g_lt_handles[dev] = h;
    } else {
      h = hit->second;
    }
    const LtKey key{dev, m, n, k, ldx, ldw, ldd, workspace_bytes};
    auto it = g_lt_plans.find(key);
    if (it == g_lt_plans.end()) {
      LtPlan pl;
      QDEC_RETURN_IF_ERROR(make_lt_plan(h, m, n, k, ldx, ldw, ldd, workspace_bytes, &pl));
      it = g_lt_plans.emplace(key, pl).first;
    }
    plan = &it->second;
  }
  const int32_t alpha = 1, beta = 0;
  W8A8_LT_RETURN(cublasLtMatmul(h, plan->desc, &alpha, w, plan->a, x, plan->b, &beta, d, plan->d, d, plan->d,
                                &plan->algo, workspace, workspace_bytes, stream));
  return Status::Ok();
}

namespace {

// ---- epilogue of the cuBLASLt backend ----------------------------------------------------------------------------

struct EpiArgs {
  int m, n;
  const int32_t* d;  // [m, ldd], ldd a multiple of 4, 16-byte aligned
  long long ldd;
  const float* sx;
  const float* sw;
  const float* bias;
  void* y;
  long long ldy;
  int y_dtype;
  int32_t* acc_out;
};

// grid (column groups / 256, min(M, 65535)): each thread 4 consecutive columns of one row (one 16-byte load of
// the int32 sums, streamed: read once), rows strided by gridDim.y. vec: Y rows take one 8- / 16-byte store per
// thread (ldy a multiple of 4, y aligned).
__global__ void __launch_bounds__(256) w8a8_epilogue_kernel(const EpiArgs a, int vec) {
  const int col = (blockIdx.x * 256 + threadIdx.x) * 4;
  if (col >= a.n) return;
  float swv[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) swv[i] = a.sw[min(col + i, a.n - 1)];
  for (int row = blockIdx.y; row < a.m; row += gridDim.y) {
    const int4 acc = __ldcs(reinterpret_cast<const int4*>(a.d + size_t(row) * a.ldd + col));
    const int v[4] = {acc.x, acc.y, acc.z, acc.w};
    const float sx = a.sx[row];
    float r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = channel_epilogue(v[i], sx, swv[i], a.bias, min(col + i, a.n - 1));
    const size_t yi = size_t(row) * a.ldy + col;
    if (vec && col + 4 <= a.n) {
      if (a.y_dtype == 0) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(r[0], r[1]), hi = __floats2bfloat162_rn(r[2], r[3]);
        uint2 u;
        u.x = *reinterpret_cast<const uint32_t*>(&lo);
        u.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(a.y) + yi) = u;
      } else if (a.y_dtype == 1) {
        const __half2 lo = __floats2half2_rn(r[0], r[1]), hi = __floats2half2_rn(r[2], r[3]);
        uint2 u;
        u.x = *reinterpret_cast<const uint32_t*>(&lo);
        u.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(static_cast<__half*>(a.y) + yi) = u;
      } else {
        *reinterpret_cast<float4*>(static_cast<float*>(a.y) + yi) = make_float4(r[0], r[1], r[2], r[3]);
      }
    } else {
      for (int i = 0; i < 4 && col + i < a.n; ++i) store_y(a.y, a.ldy, a.y_dtype, row, col + i, r[i]);
    }
    if (a.acc_out)
      for (int i = 0; i < 4 && col + i < a.n; ++i) a.acc_out[size_t(row) * a.n + col + i] = v[i];
  }
}

// ---- the mma kernel ------------------------------------------------------------------------------------------------

constexpr int kWarps = 8;
constexpr int kTileN = 32;   // output channels per CTA: 4 n8 tiles
constexpr int kChunk = 128;  // K bytes per warp step: two 16-byte pieces per lane (64 bytes apart), 4 mma k-steps

struct MmaArgs {
  int m, n, k;
  const int8_t* xq;
  long long ldq;
  const float* sx;
  const int8_t* wq;
  long long ldw;
  const float* sw;
  const float* bias;
  void* y;
  long long ldy;
  int y_dtype;
  int32_t* acc_out;
  int32_t* ws_acc;  // [m, n] int32, zero between calls (splits > 1)
  int* counters;    // [tiles], zero between calls (splits > 1)
  int splits;
  int chunks_per_split;
};

// Weights are read once per M slice: stream them past L1.
__device__ __forceinline__ uint4 ld_stream(const int8_t* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ uint32_t word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

// grid (M slices, N tiles, splits). kMT: m16 tiles per CTA (M slice = 16 * kMT rows). kU: chunks in flight per warp.
template <int kMT, int kU>
__global__ void __launch_bounds__(kWarps * 32) w8a8_mma_kernel(const MmaArgs a) {
  __shared__ int red[kMT * 16][kTileN];
  __shared__ int is_last;
  const int m0 = blockIdx.x * kMT * 16, n0 = blockIdx.y * kTileN, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int nchunks = (a.k + kChunk - 1) / kChunk;
  const int c_begin = split * a.chunks_per_split, c_end = min(nchunks, c_begin + a.chunks_per_split);

  for (int i = threadIdx.x; i < kMT * 16 * kTileN; i += kWarps * 32) (&red[0][0])[i] = 0;

  const int8_t* wrow[4];
  bool wok[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = n0 + 8 * j + g;
    wok[j] = n < a.n;
    wrow[j] = a.wq + size_t(wok[j] ? n : 0) * a.ldw + t4 * 16;
  }
  const int8_t* xrow[kMT][2];
  bool xok[kMT][2];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + 16 * i + 8 * h + g;
      xok[i][h] = r < a.m;
      xrow[i][h] = a.xq + size_t(xok[i][h] ? r : 0) * a.ldq + t4 * 16;
    }

  int acc[kMT][4][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int c0 = c_begin + warp; c0 < c_end; c0 += kWarps * kU) {
    // Piece p of a lane: bytes kb + 64 p + 16 t4 .. +15 of its rows, so the two loads of a row-tile instruction
    // pair cover one whole 128-byte line.
    uint4 b[kU][4][2], x[kU][kMT][2][2];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + kWarps * u;
#pragma unroll
      for (int pc = 0; pc < 2; ++pc) {
        const int kb = c * kChunk + 64 * pc;
        const bool in = c < c_end && kb + t4 * 16 < a.k;  // K is a multiple of 16: a piece is all in or out
#pragma unroll
        for (int j = 0; j < 4; ++j) b[u][j][pc] = in && wok[j] ? ld_stream(wrow[j] + kb) : zero;
#pragma unroll
        for (int i = 0; i < kMT; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            x[u][i][h][pc] = in && xok[i][h] ? __ldg(reinterpret_cast<const uint4*>(xrow[i][h] + kb)) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int pc = 0; pc < 2; ++pc)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int i = 0; i < kMT; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
              mma_s8(acc[i][j], word(x[u][i][0][pc], 2 * s), word(x[u][i][1][pc], 2 * s),
                     word(x[u][i][0][pc], 2 * s + 1), word(x[u][i][1][pc], 2 * s + 1), word(b[u][j][pc], 2 * s),
                     word(b[u][j][pc], 2 * s + 1));
  }

  __syncthreads();  // red is zeroed
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = 16 * i + g + 8 * (c / 2), col = 8 * j + 2 * t4 + (c % 2);
        if (acc[i][j][c] != 0) atomicAdd(&red[r][col], acc[i][j][c]);
      }
  __syncthreads();

  if (a.splits > 1) {
    for (int e = threadIdx.x; e < kMT * 16 * kTileN; e += kWarps * 32) {
      const int r = e / kTileN, col = e % kTileN, row = m0 + r, n = n0 + col;
      const int v = red[r][col];
      if (row < a.m && n < a.n && v != 0) atomicAdd(a.ws_acc + size_t(row) * a.n + n, v);
    }
    const int tile = blockIdx.x + gridDim.x * blockIdx.y;
    if (!ptx::split_arrive(a.counters + tile, a.splits, threadIdx.x == 0, &is_last, [] { __syncthreads(); })) return;
    for (int e = threadIdx.x; e < kMT * 16 * kTileN; e += kWarps * 32) {
      const int r = e / kTileN, col = e % kTileN, row = m0 + r, n = n0 + col;
      // Reads the final sum and leaves the workspace zero for the next call.
      red[r][col] = row < a.m && n < a.n ? atomicExch(a.ws_acc + size_t(row) * a.n + n, 0) : 0;
    }
    if (threadIdx.x == 0) a.counters[tile] = 0;
    __syncthreads();
  }

  for (int e = threadIdx.x; e < kMT * 16 * kTileN; e += kWarps * 32) {
    const int r = e / kTileN, col = e % kTileN, row = m0 + r, n = n0 + col;
    if (row >= a.m || n >= a.n) continue;
    const int v = red[r][col];
    store_y(a.y, a.ldy, a.y_dtype, row, n, channel_epilogue(v, a.sx[row], a.sw[n], a.bias, n));
    if (a.acc_out) a.acc_out[size_t(row) * a.n + n] = v;
  }
}

// ---- validation and planning ------------------------------------------------------------------------------------

Status invalid(const std::string& msg) {
  return Status(StatusCode::kInvalidArgument, "w8a8_gemm: " + msg);
}
bool aligned(const void* p, size_t al) {
  return reinterpret_cast<uintptr_t>(p) % al == 0;
}
size_t y_bytes(GemmDType d) {
  return d == GemmDType::kFP32 ? 4 : 2;
}

Status validate(const W8A8Params& p) {
  const int m = p.x.m, n = p.w.n, k = p.x.k;
  if (m < 1 || m > kW8A8MaxM) return invalid("M " + std::to_string(m) + " is outside 1.." + std::to_string(kW8A8MaxM));
  if (n < 1 || n > kW8A8MaxN) return invalid("N " + std::to_string(n) + " is outside 1.." + std::to_string(kW8A8MaxN));
  if (p.w.k != k)
    return invalid("activation K " + std::to_string(k) + " does not match weight K " + std::to_string(p.w.k));
  if (k < 16 || k > kInt8GemmMaxK || k % 16 != 0)
    return invalid("K " + std::to_string(k) + " must be a multiple of 16 in 16.." + std::to_string(kInt8GemmMaxK));
  if (!p.x.q || !aligned(p.x.q, 16)) return invalid("x.q is null or not 16-byte aligned");
  const long long ldq = p.x.ldq ? p.x.ldq : k;
  if (ldq < k || ldq % 16 != 0)
    return invalid("x.ldq " + std::to_string(ldq) + " must be >= K " + std::to_string(k) + " and a multiple of 16");
  if (!p.x.scale || !aligned(p.x.scale, 4)) return invalid("x.scale is null or not 4-byte aligned");
  if (!p.w.q || !aligned(p.w.q, 16)) return invalid("w.q is null or not 16-byte aligned");
  const long long ldw = p.w.ldw ? p.w.ldw : k;
  if (ldw < k || ldw % 16 != 0)
    return invalid("w.ldw " + std::to_string(ldw) + " must be >= K " + std::to_string(k) + " and a multiple of 16");
  if (!p.w.scale || !aligned(p.w.scale, 4)) return invalid("w.scale is null or not 4-byte aligned");
  if (p.bias && !aligned(p.bias, 4)) return invalid("bias is not 4-byte aligned");
  if (p.y_dtype != GemmDType::kBF16 && p.y_dtype != GemmDType::kFP16 && p.y_dtype != GemmDType::kFP32)
    return invalid("y dtype " + std::to_string(int(p.y_dtype)) + " is not bf16, fp16 or fp32");
  if (!p.y || !aligned(p.y, y_bytes(p.y_dtype))) return invalid("y is null or not aligned to its element size");
  const long long ldy = p.ldy ? p.ldy : n;
  if (ldy < n) return invalid("ldy " + std::to_string(ldy) + " < N " + std::to_string(n));
  if (p.acc && !aligned(p.acc, 4)) return invalid("acc is not 4-byte aligned");
  if (p.backend != W8A8Backend::kAuto && p.backend != W8A8Backend::kMma && p.backend != W8A8Backend::kCublasLt &&
      p.backend != W8A8Backend::kWgmma)
    return invalid("backend " + std::to_string(int(p.backend)) + " is not auto, mma, cublaslt or wgmma");
  if (p.num_splits < 0 || p.num_splits > 4096)
    return invalid("num_splits " + std::to_string(p.num_splits) + " is outside 0..4096");
  return Status::Ok();
}

// Resident CTAs per SM of the instantiation that serves kMT m16 tiles (registers decide it), cached.
Status mma_ctas_per_sm(int mt, int* out) {
  static int cached[5] = {0, 0, 0, 0, 0};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (cached[mt] == 0) {
    int n = 0;
    const void* fn = mt == 1   ? reinterpret_cast<const void*>(&w8a8_mma_kernel<1, 2>)
                     : mt == 2 ? reinterpret_cast<const void*>(&w8a8_mma_kernel<2, 1>)
                               : reinterpret_cast<const void*>(&w8a8_mma_kernel<4, 1>);
    QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, kWarps * 32, 0));
    cached[mt] = std::max(1, n);
  }
  *out = cached[mt];
  return Status::Ok();
}

int m_tiles(int m) {
  return m <= 16 ? 1 : m <= 32 ? 2 : 4;
}

struct Plan {
  W8A8Backend backend;
  int mt = 1, mslices = 1, ntiles = 1, splits = 1, chunks_per_split = 1;
  long long ldd = 0;  // cuBLASLt int32 sums
  size_t ws_bytes = 0;
  WgmmaPlan wgmma;
};

size_t round256(size_t b) {
  return (b + 255) / 256 * 256;
}

Status make_plan(const W8A8Params& p, Plan* pl) {
  QDEC_RETURN_IF_ERROR(validate(p));
  const int m = p.x.m, n = p.w.n, k = p.x.k;
  pl->backend = p.backend;
  if (pl->backend == W8A8Backend::kAuto) {
    pl->backend = m <= kW8A8AutoMmaMaxM ? W8A8Backend::kMma : W8A8Backend::kCublasLt;
    if (w8a8_auto_wgmma_size(m, n, k) && wgmma_supported().ok()) {
      DeviceInfo dev;
      QDEC_RETURN_IF_ERROR(current_device_info(&dev));
      WgmmaPlan wp;
      QDEC_RETURN_IF_ERROR(wgmma_plan(m, n, k, p.num_splits, &wp));
      if (2ll * wp.tiles_m * wp.tiles_n * wp.splits >= dev.sm_count) pl->backend = W8A8Backend::kWgmma;
    }
  }
  if (pl->backend == W8A8Backend::kWgmma) {
    QDEC_RETURN_IF_ERROR(wgmma_supported());
    QDEC_RETURN_IF_ERROR(wgmma_plan(m, n, k, p.num_splits, &pl->wgmma));
    pl->splits = pl->wgmma.splits;
    pl->ws_bytes = pl->wgmma.ws_bytes;
    return Status::Ok();
  }
  if (pl->backend == W8A8Backend::kCublasLt) {
    // [state zone, untouched][int32 sums][cuBLASLt workspace] (qdec/workspace.h).
    pl->ldd = (n + 3) / 4 * 4;
    pl->ws_bytes = kWorkspaceStateBytes + round256(size_t(m) * pl->ldd * 4) + kLtWorkspaceBytes;
    return Status::Ok();
  }
  pl->mt = m_tiles(m);
  pl->mslices = (m + 16 * pl->mt - 1) / (16 * pl->mt);
  pl->ntiles = (n + kTileN - 1) / kTileN;
  if (pl->mslices > 65535 || pl->ntiles > 65535)
    return invalid("M " + std::to_string(m) + " / N " + std::to_string(n) + " give a grid beyond 65535 tiles");
  const int nchunks = (k + kChunk - 1) / kChunk;
  int splits = p.num_splits;
  if (splits == 0) {
    DeviceInfo info;
    QDEC_RETURN_IF_ERROR(current_device_info(&info));
    int per_sm = 1;
    QDEC_RETURN_IF_ERROR(mma_ctas_per_sm(pl->mt, &per_sm));
    const long long tiles = static_cast<long long>(pl->mslices) * pl->ntiles;
    // As many splits as keep every CTA resident at once (a second wave would double the latency chain of a
    // bandwidth-bound launch), without cutting K below 8 chunks (one load batch per warp) per split.
    const long long want = static_cast<long long>(per_sm) * info.sm_count / tiles;
    splits = static_cast<int>(std::clamp<long long>(want, 1, std::max(1, nchunks / 8)));
  }
  // Split-K state (tile counters + the int32 sums, accumulated by atomics) lives in the workspace's state zone.
  const size_t split_state = round256(size_t(pl->mslices) * pl->ntiles * sizeof(int)) + size_t(m) * n * sizeof(int32_t);
  if (split_state > kWorkspaceStateBytes && std::min(splits, nchunks) > 1) {
    if (p.num_splits > 1)
      return invalid("num_splits " + std::to_string(p.num_splits) + " needs " + std::to_string(split_state) +
                     " bytes of split-K state at M " + std::to_string(m) + ", N " + std::to_string(n) +
                     ", more than the workspace's state zone of " + std::to_string(kWorkspaceStateBytes));
    splits = 1;
  }
  splits = std::min(splits, nchunks);
  pl->chunks_per_split = (nchunks + splits - 1) / splits;
  pl->splits = (nchunks + pl->chunks_per_split - 1) / pl->chunks_per_split;
  if (pl->splits > 65535) return invalid("num_splits " + std::to_string(splits) + " exceeds 65535");
  if (pl->splits > 1)
    pl->ws_bytes = round256(size_t(pl->mslices) * pl->ntiles * sizeof(int)) + size_t(m) * n * sizeof(int32_t);
  return Status::Ok();
}

}  // namespace
}  // namespace w8a8

Status w8a8_gemm_workspace_bytes(const W8A8Params& p, size_t* bytes) {
  if (!bytes) return Status(StatusCode::kInvalidArgument, "w8a8_gemm_workspace_bytes: bytes is null");
  w8a8::Plan pl;
  QDEC_RETURN_IF_ERROR(w8a8::make_plan(p, &pl));
  *bytes = pl.ws_bytes;
  return Status::Ok();
}

Status w8a8_plan(const W8A8Params& p, W8A8Backend* backend, int* num_splits, const char** wgmma_kernel) {
  w8a8::Plan pl;
  QDEC_RETURN_IF_ERROR(w8a8::make_plan(p, &pl));
  if (backend) *backend = pl.backend;
  if (num_splits) *num_splits = pl.backend == W8A8Backend::kMma || pl.backend == W8A8Backend::kWgmma ? pl.splits : 1;
  if (wgmma_kernel)
    *wgmma_kernel = pl.backend != W8A8Backend::kWgmma ? ""
                    : pl.wgmma.coop                   ? "cooperative"
                    : pl.wgmma.bn == 160              ? "pingpong-n160"
                                                      : "pingpong";
  return Status::Ok();
}

Status w8a8_gemm(const W8A8Params& p, cudaStream_t stream) {
  using namespace w8a8;
  Plan pl;
  QDEC_RETURN_IF_ERROR(make_plan(p, &pl));
  if (pl.ws_bytes > 0) {
    if (!p.workspace) return invalid("workspace is null; " + std::to_string(pl.ws_bytes) + " bytes are needed");
    if (!aligned(p.workspace, 256)) return invalid("workspace is not 256-byte aligned");
    if (p.workspace_bytes < pl.ws_bytes)
      return Status(StatusCode::kOutOfMemory, "w8a8_gemm: workspace_bytes " + std::to_string(p.workspace_bytes) +
                                                  " < " + std::to_string(pl.ws_bytes) + " needed");
  }
  const int m = p.x.m, n = p.w.n, k = p.x.k;
  const long long ldq = p.x.ldq ? p.x.ldq : k, ldw = p.w.ldw ? p.w.ldw : k, ldy = p.ldy ? p.ldy : n;
  if (pl.backend == W8A8Backend::kWgmma) {
    const WgmmaArgs wa{m, n, k, p.x.scale, p.w.scale, p.bias, p.y, ldy, int(p.y_dtype), p.acc};
    return wgmma_launch(wa, pl.wgmma, p.x.q, ldq, p.w.q, ldw, p.workspace, stream);
  }
  if (pl.backend == W8A8Backend::kCublasLt) {
    int32_t* d = reinterpret_cast<int32_t*>(static_cast<char*>(p.workspace) + kWorkspaceStateBytes);
    const size_t d_bytes = round256(size_t(m) * pl.ldd * 4);
    QDEC_RETURN_IF_ERROR(cublaslt_s8_gemm(m, n, k, p.x.q, ldq, p.w.q, ldw, d, pl.ldd,
                                          reinterpret_cast<char*>(d) + d_bytes, kLtWorkspaceBytes, stream));
    EpiArgs e{m, n, d, pl.ldd, p.x.scale, p.w.scale, p.bias, p.y, ldy, int(p.y_dtype), p.acc};
    const int vec = ldy % 4 == 0 && aligned(p.y, p.y_dtype == GemmDType::kFP32 ? 16 : 8);
    const dim3 grid(static_cast<unsigned>((n + 1023) / 1024), static_cast<unsigned>(std::min(m, 65535)));
    w8a8_epilogue_kernel<<<grid, 256, 0, stream>>>(e, vec);
    return cuda_status(cudaGetLastError(), "w8a8 epilogue launch");
  }
  MmaArgs a{m,      n,   k,   p.x.q,          ldq,   p.x.scale, p.w.q,   ldw,       p.w.scale,
            p.bias, p.y, ldy, int(p.y_dtype), p.acc, nullptr,   nullptr, pl.splits, pl.chunks_per_split};
  if (pl.splits > 1) {
    a.counters = static_cast<int*>(p.workspace);
    a.ws_acc = reinterpret_cast<int32_t*>(static_cast<char*>(p.workspace) +
                                          round256(size_t(pl.mslices) * pl.ntiles * sizeof(int)));
  }
  const dim3 grid(static_cast<unsigned>(pl.mslices), static_cast<unsigned>(pl.ntiles),
                  static_cast<unsigned>(pl.splits));
  // Dispatch list: (kMT, kU) in {(1, 2), (2, 1), (4, 1)}.
  if (pl.mt == 1) {
    w8a8_mma_kernel<1, 2><<<grid, kWarps * 32, 0, stream>>>(a);
  } else if (pl.mt == 2) {
    w8a8_mma_kernel<2, 1><<<grid, kWarps * 32, 0, stream>>>(a);
  } else {
    w8a8_mma_kernel<4, 1><<<grid, kWarps * 32, 0, stream>>>(a);
  }
  return cuda_status(cudaGetLastError(), "w8a8 mma kernel launch");
}

}  // namespace qdec
