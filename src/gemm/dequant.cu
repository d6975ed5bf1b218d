// Dequantization of a packed weight into a dense bf16/fp16 [N, K] matrix (the large-M path: the scratch is then
// the A operand of a cuBLASLt GEMM, docs/gemm.md), and the bias/clamp epilogue of that path.
//
// One thread per (16-row tile, K chunk, lane): it reads the lane's 16 bytes of the tile (the same fragment
// order the fused kernel reads, docs/formats.md) and writes the 32 (int4) or 16 (int8) values it holds:
// rows g and g+8 of the tile, columns 2t, 2t+1, 2t+8, 2t+9 of each 16-wide k-step. Values are q * s + o in
// fp32 with one rounding to 16 bits (an FMA), the scales read once per group.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gemm/dequant_kernel.cuh"
#include "gemm/fused_kernel.cuh"
#include "runtime/cuda_check.h"

namespace qdec::wq {
namespace {

__device__ __forceinline__ void store16(void* out, size_t idx, float v, int bf16) {
  if (bf16) {
    static_cast<__nv_bfloat16*>(out)[idx] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(out)[idx] = __float2half_rn(v);
  }
}

__global__ void __launch_bounds__(256) dequant_kernel(const __grid_constant__ DequantParams p) {
  const int chunk = p.bits == 4 ? 64 : 32;
  const int chunks_per_row = p.k_pad / chunk;
  const int nt0 = p.row_begin / 16, nt1 = (p.row_end + 15) / 16;
  const long long total = static_cast<long long>(nt1 - nt0) * chunks_per_row * 32;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(i % 32);
    const long long tile = i / 32 + static_cast<long long>(nt0) * chunks_per_row;
    const int nt = static_cast<int>(tile / chunks_per_row), c = static_cast<int>(tile % chunks_per_row);
    const uint4 v = *reinterpret_cast<const uint4*>(p.codes + tile * 512 + lane * 16);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    const int g = lane / 4, t = lane % 4;
    const int ksteps = chunk / 16;
    for (int s = 0; s < ksteps; ++s) {
      for (int reg = 0; reg < 4; ++reg) {
        const int row = nt * 16 + g + 8 * (reg & 1);
        if (row >= p.row_end) continue;
        for (int e = 0; e < 2; ++e) {
          const int col = c * chunk + s * 16 + 2 * t + e + 8 * (reg >> 1);
          if (col >= p.k) continue;
          const int grp = col / p.group_k;
          float val;
          if (p.bits == 4) {
            const int nib = reg + 4 * e;
            const float q = static_cast<float>((words[s] >> (4 * nib)) & 0xF);
            const __half2 m =
                *reinterpret_cast<const __half2*>(p.meta + (static_cast<size_t>(grp) * p.n_pad + row) * 4);
            // int4-zp: (q - z) * s, exact in fp32; int4: q * s + o with one rounding.
            val = p.zero_point ? (q - __high2float(m)) * __low2float(m) : fmaf(q, __low2float(m), __high2float(m));
          } else {
            const uint32_t w = words[2 * s + (reg >> 1)];
            const int byte = 2 * (reg & 1) + e;
            const float q = static_cast<float>(static_cast<int>((w >> (8 * byte)) & 0xFF) - 128);
            val = q * __half2float(
                          *reinterpret_cast<const __half*>(p.meta + (static_cast<size_t>(grp) * p.n_pad + row) * 2));
          }
          store16(p.out, static_cast<size_t>(row - p.row_begin) * p.k + col, val, p.out_bf16);
        }
      }
    }
  }
}

__global__ void bias_act_kernel(void* y, long long ldy, int m, int n, int y_dtype, const float* bias, int act) {
  const long long total = static_cast<long long>(m) * n;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / n;
    const int c = static_cast<int>(i % n);
    const long long idx = r * ldy + c;
    float v;
    if (y_dtype == 0) {
      v = __bfloat162float(static_cast<const __nv_bfloat16*>(y)[idx]);
    } else if (y_dtype == 1) {
      v = __half2float(static_cast<const __half*>(y)[idx]);
    } else {
      v = static_cast<const float*>(y)[idx];
    }
    store_y(y, idx, apply_act(v + (bias ? bias[c] : 0.f), act), y_dtype);
  }
}

}  // namespace

Status launch_dequant(const DequantParams& p, cudaStream_t stream) {
  const int chunk = p.bits == 4 ? 64 : 32;
  const long long total = static_cast<long long>((p.row_end + 15) / 16 - p.row_begin / 16) * (p.k_pad / chunk) * 32;
  const long long blocks = std::min<long long>((total + 255) / 256, 132LL * 16);
  dequant_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  return cuda_status(cudaGetLastError(), "dequant_kernel launch");
}

Status launch_bias_act(void* y, long long ldy, int m, int n, int y_dtype, const float* bias, int act,
                       cudaStream_t stream) {
  const long long total = static_cast<long long>(m) * n;
  const long long blocks = std::min<long long>((total + 255) / 256, 132LL * 16);
  bias_act_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, ldy, m, n, y_dtype, bias, act);
  return cuda_status(cudaGetLastError(), "bias_act_kernel launch");
}

}  // namespace qdec::wq
