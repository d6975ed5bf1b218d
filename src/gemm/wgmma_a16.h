// The weight-only GEMM's wgmma path (GemmPath::kWgmma, src/gemm/wgmma_a16.cu, docs/gemm.md "The wgmma path"): int4
// and int8 weights in the packed layout of docs/formats.md, dequantized in registers into wgmma's register A operand,
// X by the TMA into shared memory as its B operand, fp32 accumulation. sm_90a only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "qdec/status.h"
#include "qdec/weight_formats.h"

namespace qdec::wq {

// Token tiles (CTA rows of X) the kernel is compiled for.
constexpr int kA16TileMs[] = {64, 128, 256};

struct A16Plan {
  int tile_m = 0;                              // tokens per CTA: 64, 128 or 256
  int m_blocks = 0, n_blocks = 0;              // token tiles, 128-channel blocks
  int k_tiles = 0;                             // 64-value K tiles of the packed weight
  int splits = 1, kt_per_split = 0;            // split-K
  size_t ticket_bytes = 0, partial_bytes = 0;  // workspace (state zone), 0 without split-K
  int smem = 0;                                // dynamic shared memory per CTA
};

// The launch shape at M for the packed layout L: tile_m 0 chooses the token tile (else 64, 128 or 256), num_splits 0
// the split count (else as given, at most one split per K tile). Errors name the offending value.
Status a16_plan(int m, const WeightLayout& L, int tile_m, int num_splits, int sm_count, A16Plan* plan);

// Unsupported (with the reason) unless the device is sm_90 and the library carries sm_90a code.
Status a16_supported();

struct A16Args {
  const uint8_t* codes = nullptr;  // packed int4 / int8 codes, 16-byte aligned
  const uint8_t* meta = nullptr;   // packed meta, 16-byte aligned
  const void* x = nullptr;         // [m, ldx] bf16 / fp16, 16-byte aligned, ldx % 8 == 0
  long long ldx = 0;
  bool bf16 = true;
  void* y = nullptr;
  long long ldy = 0;
  int y_dtype = 0;  // GemmDType order
  const float* bias = nullptr;
  int act = 0;  // Activation order
  int m = 0;
  bool zero_point = false;
  void* workspace = nullptr;  // the plan's ticket_bytes + partial_bytes, zero between calls (split-K only)
};

Status a16_launch(const A16Args& a, const WeightLayout& L, const A16Plan& plan, cudaStream_t stream);

}  // namespace qdec::wq
