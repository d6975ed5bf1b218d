// The kWgmma backend of qdec/w8a8_gemm.h (src/int8gemm/w8a8_wgmma.cu): work in progress, see that file.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "qdec/status.h"

namespace qdec::w8a8 {

struct WgmmaArgs {
  int m, n, k;
  const float* x_scale;  // [M]
  const float* w_scale;  // [N]
  const float* bias;     // [N] or null
  void* y;
  long long ldy;
  int y_dtype;   // GemmDType order
  int32_t* acc;  // optional [M, N] int32 sums (ld N)
  // Set by wgmma_launch from the plan:
  int tiles_m = 0, tiles_n = 0, nk = 0, splits = 1, kt_per_split = 0;
  int* counters = nullptr;  // [tiles] (splits > 1), zero between calls
  // [tiles, splits, 32 x 128 (coop: 32 x 256)] int4 chunks of the int32 partial sums (splits > 1)
  int4* partials = nullptr;
  bool vec_y = false;  // Y takes column-pair vector stores
};

// Tiles of 128 x 128 (the ping-pong kernel) or 128 x 256 (coop: the cooperative kernel, for long K with one or
// two tiles per SM), K in steps of 128; the split-K count (num_splits 0: chosen from the device's SM count), the
// persistent grid (<= one CTA per SM) and the workspace (tile counters + the partials; 0 bytes without split-K;
// zero-filled once by the caller: the counters go back to zero after every call).
struct WgmmaPlan {
  int tiles_m = 0, tiles_n = 0, nk = 0, splits = 1, kt_per_split = 0, grid = 0;
  bool coop = false;
  int bn = 128;  // the ping-pong kernel's tile width: 128, or 160 (unsplit; wgmma_plan)
  size_t counters_bytes = 0, ws_bytes = 0;
};
Status wgmma_plan(int m, int n, int k, int num_splits, WgmmaPlan* plan);

// Unsupported (with the reason) unless the device is sm_90 and the library carries sm_90a code.
Status wgmma_supported();
// Xq [M, ldq] and Wq [N, ldw] int8, K-contiguous, 16-byte aligned, ld multiples of 16 (validated by the caller).
Status wgmma_launch(const WgmmaArgs& a, const WgmmaPlan& plan, const int8_t* xq, long long ldq, const int8_t* wq,
                    long long ldw, void* workspace, cudaStream_t stream);

// An int8 [rows, k] matrix (leading dimension ld bytes; base and ld 16-byte aligned) as a TMA tensor map of boxes of
// box_rows rows x box_k bytes in the given swizzle mode; rows past `rows` read as zeros. Also used by the W4A8 wgmma
// kernel for X. `what` names the operand in the error.
// A 2-D tensor map of `type` elements: dim0 elements per row (contiguous), dim1 rows stride_bytes apart (base and
// stride 16-byte aligned), boxes of box0 x box1 elements; elements past either dimension read as zero. `what` names
// the operand in the error. int8_tensor_map below is its int8 form.
Status tensor_map_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, unsigned long long dim0,
                     unsigned long long dim1, unsigned long long stride_bytes, int box0, int box1,
                     CUtensorMapSwizzle swizzle, const char* what);
Status int8_tensor_map(CUtensorMap* map, const int8_t* base, int rows, int k, long long ld, int box_k, int box_rows,
                       CUtensorMapSwizzle swizzle, const char* what);

}  // namespace qdec::w8a8
