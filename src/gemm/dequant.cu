// Dequantization of a packed weight into a dense bf16/fp16 [N, K] matrix (the large-M path: the scratch is then
// the A operand of a cuBLASLt GEMM, docs/gemm.md), and the bias/clamp epilogue of that path.
//
// One warp per 512-byte tile of the packed layout (docs/formats.md): a coalesced 16-byte load per lane into
// shared memory, then 16-byte row-contiguous stores. Values are q * s + o in fp32 with one rounding to 16 bits
// (an FMA; int4-zp: (q - z) * s, exact in fp32), the scale read once per 8 values.
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

// One warp per 512-byte tile: the tile goes to shared memory with one coalesced 16-byte load per lane, then
// each lane writes whole 8-value runs of a row (16-byte stores when K % 8 == 0): lane L takes row L / 2 and
// the half (L % 2) of the tile's columns. One meta read per 8 values (a group is >= 32 values).
__global__ void __launch_bounds__(256) dequant_kernel(const __grid_constant__ DequantParams p) {
  __shared__ __align__(16) uint8_t tile_sh[8][512];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunk = p.bits == 4 ? 64 : 32;
  const int chunks_per_row = p.k_pad / chunk;
  const int nt0 = p.row_begin / 16, nt1 = (p.row_end + 15) / 16;
  const long long tiles = static_cast<long long>(nt1 - nt0) * chunks_per_row;
  const bool vec = (p.k % 8) == 0;
  uint8_t* sh = tile_sh[warp];
  const int r = lane / 2, g = r % 8, hi = r / 8;
  const int half = chunk / 2;  // columns per lane: within one group (groups are >= 32 and aligned)
  // The lane's codes and its (row, group) meta for a tile: fetched one tile ahead, so that a warp keeps a
  // load in flight while it converts and stores the current tile.
  auto fetch = [&](long long tile, uint4* v, uint32_t* m) {
    const long long gt = tile + static_cast<long long>(nt0) * chunks_per_row;
    *v = *reinterpret_cast<const uint4*>(p.codes + gt * 512 + lane * 16);
    const int nt = static_cast<int>(gt / chunks_per_row), c = static_cast<int>(gt % chunks_per_row);
    const int row = nt * 16 + r, col = c * chunk + (lane % 2) * half;
    *m = 0;
    if (row < p.row_end && col < p.k) {
      const size_t e = static_cast<size_t>(col / p.group_k) * p.n_pad + row;
      *m = p.bits == 4 ? *reinterpret_cast<const uint32_t*>(p.meta + e * 4)
                       : static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p.meta + e * 2));
    }
  };
  const long long stride = gridDim.x * 8LL;
  long long tile = blockIdx.x * 8LL + warp;
  uint4 v_cur = make_uint4(0, 0, 0, 0);
  uint32_t m_cur = 0;
  if (tile < tiles) fetch(tile, &v_cur, &m_cur);
  for (; tile < tiles; tile += stride) {
    uint4 v_next = make_uint4(0, 0, 0, 0);
    uint32_t m_next = 0;
    if (tile + stride < tiles) fetch(tile + stride, &v_next, &m_next);
    const long long gt = tile + static_cast<long long>(nt0) * chunks_per_row;
    const int nt = static_cast<int>(gt / chunks_per_row), c = static_cast<int>(gt % chunks_per_row);
    __syncwarp();
    *reinterpret_cast<uint4*>(sh + lane * 16) = v_cur;
    __syncwarp();
    const uint32_t m_bits = m_cur;
    v_cur = v_next;
    m_cur = m_next;
    const int row = nt * 16 + r;
    if (row >= p.row_end) continue;
    float sc, off = 0.f, zp = 0.f;
    if (p.bits == 4) {
      const __half2 m = *reinterpret_cast<const __half2*>(&m_bits);
      sc = __low2float(m);
      (p.zero_point ? zp : off) = __high2float(m);
    } else {
      const uint16_t b = static_cast<uint16_t>(m_bits);
      sc = __half2float(*reinterpret_cast<const __half*>(&b));
    }
    const int runs = chunk / 16;  // 8-value runs per lane
    for (int run = 0; run < runs; ++run) {
      const int cl = (lane % 2) * half + run * 8;  // first column of the run within the tile
      const int col0 = c * chunk + cl;
      if (col0 >= p.k) break;
      const int s = cl / 16, khalf = (cl % 16) / 8;
      const int reg = hi + 2 * khalf;
      float v[8];
#pragma unroll
      for (int e8 = 0; e8 < 8; ++e8) {
        const int t = e8 / 2, e = e8 % 2, ln = g * 4 + t;
        float q;
        if (p.bits == 4) {
          const uint32_t w = *reinterpret_cast<const uint32_t*>(sh + ln * 16 + s * 4);
          q = static_cast<float>((w >> (4 * (reg + 4 * e))) & 0xF);
          // int4-zp: (q - z) * s, exact in fp32; int4: q * s + o with one rounding.
          v[e8] = p.zero_point ? (q - zp) * sc : fmaf(q, sc, off);
        } else {
          q = static_cast<float>(static_cast<int>(sh[ln * 16 + s * 8 + reg * 2 + e]) - 128);
          v[e8] = q * sc;
        }
      }
      const size_t base = static_cast<size_t>(row - p.row_begin) * p.k + col0;
      if (vec) {
        uint4 o;
        uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (p.out_bf16) {
            __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
            ow[i] = *reinterpret_cast<uint32_t*>(&h);
          } else {
            __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
            ow[i] = *reinterpret_cast<uint32_t*>(&h);
          }
        }
        *reinterpret_cast<uint4*>(static_cast<uint8_t*>(p.out) + base * 2) = o;
      } else {
        for (int i = 0; i < 8 && col0 + i < p.k; ++i) store16(p.out, base + i, v[i], p.out_bf16);
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
  const long long tiles = static_cast<long long>((p.row_end + 15) / 16 - p.row_begin / 16) * (p.k_pad / chunk);
  const long long blocks = std::min<long long>((tiles + 7) / 8, 132LL * 16);
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
