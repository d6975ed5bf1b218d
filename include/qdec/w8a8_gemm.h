// W8A8 GEMMs on INT8 tensor cores (issue 5). CPU ground truth: qdec/int8_quant.h (w8a8_gemm_reference,
// w8a8_block_gemm_reference); design, layouts and measurements: docs/int8_gemm.md.
//
// Per output channel:  Y[M, N] = fp32(acc) * s_x[m] * s_w[n] (+ bias[n]),  acc = Xq[M, K] . Wq[N, K]^T in int32
//   X   per-token int8 activations (Int8ActivationsView, from qdec/act_quant.h)
//   W   int8 [N, ldw] row-major (Int8ChannelWeights::q as is: no prepack) with fp32 scales [N]
//   Y   bf16, fp16 or fp32 [M, ldy]
// The epilogue is the same fp32 arithmetic on every backend, (fp32(acc) * s_x) * s_w then + bias, each step
// rounded once, so that backends agree bit for bit. Backends:
//   kMma       qdec's kernel: mma.sync m16n8k32 s8, weights streamed once per 64 rows of M, int32 split-K through
//              the workspace (exact, so deterministic), epilogue fused; wins where the GEMM is weight-bandwidth
//              bound (small M)
//   kCublasLt  cuBLASLt int8 x int8 -> int32 into the workspace, then qdec's epilogue kernel (cuBLASLt has no
//              int8 kernel with a 16-bit output or per-row x per-column scales on sm_90: measured, docs/int8_gemm.md)
//   kWgmma     qdec's sm_90a kernel: persistent CTAs whose two consumer warpgroups take 128 x 128 tiles in turn
//              (one's epilogue under the other's math), TMA into a shared-memory ring, wgmma.m64n128k32 s8 from
//              shared memory, int32 split-K through the workspace where tiles are few, epilogue fused from the
//              accumulator registers; Unsupported (a Status, nothing launched) on other devices or builds without
//              sm_90a
//   kAuto      kWgmma where it is supported, its 128 x 128 (tile, split) units are at least half as many as the
//              SMs and the size qualifies (w8a8_auto_wgmma_size): from M = kW8A8AutoWgmmaMinM at least
//              kW8A8AutoWgmmaMinSteps 128 x 256 x 128 tile steps (w8a8_wgmma_steps); below, N >=
//              kW8A8AutoWgmmaSmallMinN as well, and at M <= kW8A8AutoMmaMaxM kW8A8AutoWgmmaTinyMinSteps steps.
//              Otherwise kMma for M <= kW8A8AutoMmaMaxM, kCublasLt above (w8a8_plan says which)
//
// Per K-block (seed 003): both operands quantized per block of 32 / 64 / 128 along K with scale and offset;
//   Y[m, n] = sum_blocks (sA sB C + sA oB SA + oA sB SB + L oA oB) (+ bias[n]), C the int32 block dot product and
//   SA, SB the block sums of the codes; qdec's kernel (mma.sync, int32 per block, fp32 across blocks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "qdec/gemm.h"
#include "qdec/int8_gemm.h"
#include "qdec/status.h"

namespace qdec {

enum class W8A8Backend : uint8_t { kAuto = 0, kMma, kCublasLt, kWgmma };
const char* w8a8_backend_name(W8A8Backend b);

// Largest M for which kAuto takes the kMma kernel where it does not take kWgmma (from the H200 measurements in
// docs/int8_gemm.md).
inline constexpr int kW8A8AutoMmaMaxM = 16;
// The problem size in 128 x 256 x 128 tile steps: ceil(M / 128) * ceil(N / 256) * ceil(K / 128). The kAuto bounds
// come from the H200 tables in docs/int8_gemm.md. From M = 65 (session 17, the ping-pong kernel, 7 shapes x M = 32
// ... 4096): kWgmma was faster than cuBLASLt + epilogue (or tied) on every shape of at least 768 steps (6144 x 4096
// at M = 128) and lost below (1280 x 8192 at M = 256: 640 steps, 18.5 against 16.8 us; 4096 x 4096 at M = 128:
// 512); at M = 4096 it was faster on 6 of 7 shapes (cuBLASLt + epilogue on 4096 x 14336 by 5-10%), so there is no
// upper bound. Below M = 65 (session 25, after the last row block's X box stopped at M; M = 2-64): kWgmma won on the
// shapes with N >= 8192 at M = 17-64 (8192 x 3584 1.15-1.43x, 8192 x 8192 1.12x and 28672 x 4096 1.29x at M = 32)
// and lost or tied below that N (4096 x 14336 by 4-10%, 4096 x 4096 by 12-14%, 6144 x 4096 within 5% either way); at
// M = 1-16 it beat kMma on 28672 x 4096 (3584 steps; H200 1.23-1.33x, H100 1.12x), split on 8192 x 8192 (2048
// steps; H200 1.04-1.07x faster, H100 1.09-1.10x slower) and lost on 8192 x 3584 (896 steps) and 4096 x 14336.
inline constexpr int kW8A8AutoWgmmaMinM = 65;
inline constexpr long long kW8A8AutoWgmmaMinSteps = 768;
inline constexpr int kW8A8AutoWgmmaSmallMinN = 8192;
inline constexpr long long kW8A8AutoWgmmaTinyMinSteps = 3584;
inline constexpr int kW8A8AutoWgmmaMaxM = 1 << 20;
inline long long w8a8_wgmma_steps(int m, int n, int k) {
  return static_cast<long long>((m + 127) / 128) * ((n + 255) / 256) * ((k + 127) / 128);
}
// The size part of kAuto's choice of kWgmma (the plan adds: supported, units for half the SMs).
inline bool w8a8_auto_wgmma_size(int m, int n, int k) {
  if (m < 1 || m > kW8A8AutoWgmmaMaxM) return false;
  const long long steps = w8a8_wgmma_steps(m, n, k);
  if (m >= kW8A8AutoWgmmaMinM) return steps >= kW8A8AutoWgmmaMinSteps;
  if (n < kW8A8AutoWgmmaSmallMinN) return false;
  return steps >= (m <= kW8A8AutoMmaMaxM ? kW8A8AutoWgmmaTinyMinSteps : kW8A8AutoWgmmaMinSteps);
}
// N and M limits of the kernels (grid dimensions, int32 indexing of the workspace).
inline constexpr int kW8A8MaxM = 1 << 20;
inline constexpr int kW8A8MaxN = 1 << 20;

// int8 weights per output channel on the device (Int8ChannelWeights copied as is).
struct Int8WeightView {
  int n = 0, k = 0;
  const int8_t* q = nullptr;     // [n, ldw] codes in -127..127, 16-byte aligned
  long long ldw = 0;             // >= k and a multiple of 16; 0 means k
  const float* scale = nullptr;  // [n] fp32
};

struct W8A8Params {
  Int8ActivationsView x;  // x.k == w.k; K a multiple of 16, at most kInt8GemmMaxK
  Int8WeightView w;
  const float* bias = nullptr;  // optional [N]
  GemmDType y_dtype = GemmDType::kBF16;
  void* y = nullptr;       // [M, ldy]
  long long ldy = 0;       // >= N; 0 means N
  int32_t* acc = nullptr;  // optional [M, N] (ld N): also receives the int32 accumulators (tests, debugging)
  W8A8Backend backend = W8A8Backend::kAuto;
  int num_splits = 0;  // kMma, kWgmma: 0 = automatic, >= 1 forces the split-K count
  // Device workspace of w8a8_gemm_workspace_bytes(), 256-byte aligned. Zero-fill it once after allocating it: the
  // kMma split-K accumulators and semaphores must start at zero; every call leaves them zero again. One buffer of
  // the largest size can serve every backend and call (qdec/workspace.h: scratch stays out of the state zone).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of workspace the call needs (depends on the backend that M selects, and the shapes).
Status w8a8_gemm_workspace_bytes(const W8A8Params& p, size_t* bytes);
// The backend kAuto resolves to, and the split count (kMma, kWgmma; 1 for cuBLASLt), after validation. With kWgmma,
// wgmma_kernel names the kernel that runs: "pingpong" (128 x 128 tiles, a consumer warpgroup per tile),
// "pingpong-n160" (the same with 128 x 160 tiles, unsplit, where they take fewer rounds of the SMs: N = 1280 at
// M = 4096) or "cooperative" (128 x 256 tiles, both consumers on one; long K with one or two tiles per SM); "" for
// the other backends. Null outputs are skipped.
Status w8a8_plan(const W8A8Params& p, W8A8Backend* backend, int* num_splits, const char** wgmma_kernel = nullptr);
// Validate, then launch on `stream`. On error nothing is launched.
Status w8a8_gemm(const W8A8Params& p, cudaStream_t stream);

// ---- per K-block (seed 003) -------------------------------------------------------------------------------------
// One operand of the block GEMM on the device (Int8BlockQuant, or quantize_blocks' output).
struct Int8BlockView {
  int rows = 0, k = 0, block = 0;      // block 32, 64 or 128; K a multiple of it
  const int8_t* q = nullptr;           // [rows, ld] codes in -128..127, 16-byte aligned
  long long ld = 0;                    // >= k and a multiple of 16; 0 means k
  const float* scale = nullptr;        // [rows, k / block]
  const float* offset = nullptr;       // [rows, k / block]
  const int32_t* block_sum = nullptr;  // [rows, k / block]
};

struct W8A8BlockParams {
  Int8BlockView a;              // activations [M, K]
  Int8BlockView b;              // weights [N, K], the same K and block
  const float* bias = nullptr;  // optional [N]
  GemmDType y_dtype = GemmDType::kBF16;
  void* y = nullptr;  // [M, ldy]
  long long ldy = 0;  // >= N; 0 means N
};

// Validate, then launch on `stream`. On error nothing is launched. No workspace.
Status w8a8_block_gemm(const W8A8BlockParams& p, cudaStream_t stream);

}  // namespace qdec
