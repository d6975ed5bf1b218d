// Device helpers shared by the W8A8 kernels (w8a8_gemm.cu, w8a8_block.cu): the INT8 tensor-core instruction and
// the output store. Fragment layouts: PTX ISA, "mma.m16n8k32" for .s8 (A row-major 16x32, B column 32x8, D int32).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace qdec::w8a8 {

// d (16x8 int32) += a (16x32 s8, row) * b (32x8 s8, col). a0/a1: rows g / g+8, k 4t..4t+3; a2/a3: the same rows,
// k 16+4t..; b0: k 4t..4t+3 of column g, b1: k 16+4t.. (g = lane / 4, t = lane % 4). The kernels only need every
// thread to hand A and B the same k bytes in the same slots, which lets them load 8 or 16 contiguous bytes.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Y element store; y_dtype: GemmDType order (0 bf16, 1 fp16, 2 fp32).
__device__ __forceinline__ void store_y(void* y, long long ldy, int y_dtype, int row, int col, float v) {
  const size_t i = size_t(row) * size_t(ldy) + size_t(col);
  if (y_dtype == 0) {
    static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v);
  } else if (y_dtype == 1) {
    static_cast<__half*>(y)[i] = __float2half_rn(v);
  } else {
    static_cast<float*>(y)[i] = v;
  }
}

// The per-channel epilogue, identical on every backend: (fp32(acc) * s_x) * s_w, then + bias, one rounding each.
__device__ __forceinline__ float channel_epilogue(int acc, float sx, float sw, const float* bias, int col) {
  float v = __fmul_rn(__fmul_rn(__int2float_rn(acc), sx), sw);
  if (bias) v = __fadd_rn(v, bias[col]);
  return v;
}

}  // namespace qdec::w8a8
