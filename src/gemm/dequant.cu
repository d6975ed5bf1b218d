// Dequantization of a packed weight into a dense bf16/fp16 [N, K] matrix (the large-M path: the scratch is then
// the A operand of a cuBLASLt GEMM, docs/gemm.md), and the bias/clamp epilogue of that path.
//
// One warp per 512-byte tile of the packed layout (docs/formats.md): a coalesced 16-byte load per lane,
// conversion in registers, a shared-memory transpose to row order, 16-byte row-contiguous stores. Values are
// q * s + o in fp32 with one rounding to 16 bits (an FMA; int4-zp: q * s - z * s).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gemm/dequant_kernel.cuh"
#include "gemm/fused_kernel.cuh"
#include "runtime/cuda_check.h"

namespace qdec::wq {
namespace {

// One warp per 512-byte tile, each lane converting the 16 bytes it loaded (its A-fragment values: rows g, g + 8,
// columns 2t, 2t + 1, 2t + 8, 2t + 9 of every k-step) in registers: code -> fp32 by the 2^23 magic number
// (exact), one FMA with the row's scale and offset, a packed conversion to 16 bits, a 32-bit shared store into
// the warp's row-major 16 x C tile (rows padded by 16 bytes: conflict-free), then 16-byte row-contiguous global
// stores (8 lanes write one 128-byte row segment). Each warp walks tiles with a stride of the whole grid and
// prefetches its next tile's codes and meta before converting the current one.
template <int BITS, bool BF16>
__global__ void __launch_bounds__(256) dequant_kernel(const __grid_constant__ DequantParams p) {
  constexpr int kChunk = BITS == 4 ? 64 : 32;
  constexpr int kPitch = kChunk + 8;  // halves per shared row
  constexpr int kMetaE = BITS == 4 ? 4 : 2;
  __shared__ __align__(16) uint16_t tile_sh[8][16 * kPitch];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks_per_row = p.k_pad / kChunk;
  const int nt0 = p.row_begin / 16, nt1 = (p.row_end + 15) / 16;
  const long long tiles = static_cast<long long>(nt1 - nt0) * chunks_per_row;
  const int num_groups = (p.k + p.group_k - 1) / p.group_k;
  const bool vec = (p.k % 8) == 0;
  uint16_t* sh = tile_sh[warp];
  const uint32_t sh_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sh));

  // Codes and meta of a tile for this lane: meta of rows g, g + 8 for the groups of the tile's two column halves
  // (the same group unless int4 g32).
  auto fetch = [&](long long tile, uint4* v, uint32_t (&m)[4]) {
    const long long gt = tile + static_cast<long long>(nt0) * chunks_per_row;
    *v = __ldcs(reinterpret_cast<const uint4*>(p.codes + gt * 512) + lane);
    const int nt = static_cast<int>(gt / chunks_per_row), c = static_cast<int>(gt % chunks_per_row);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int grp = min(num_groups - 1, (c * kChunk + hf * (kChunk / 2)) / p.group_k);
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const size_t e = static_cast<size_t>(grp) * p.n_pad + nt * 16 + g + 8 * rr;
        if constexpr (BITS == 4) {
          m[hf * 2 + rr] = __ldg(reinterpret_cast<const uint32_t*>(p.meta + e * kMetaE));
        } else {
          m[hf * 2 + rr] = __ldg(reinterpret_cast<const uint16_t*>(p.meta + e * kMetaE));
        }
      }
    }
  };
  auto pack = [](float lo, float hi) -> uint32_t {
    if constexpr (BF16) {
      __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<uint32_t*>(&h);
    } else {
      __half2 h = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<uint32_t*>(&h);
    }
  };
  // Exact fp32 value of an integer code 0..255.
  auto code_f = [](uint32_t q) { return __uint_as_float(0x4B000000u | q) - 8388608.f; };
  // Exact q of an int8 byte u = q + 128.
  auto code8_f = [](uint32_t u) { return __uint_as_float(0x4B000000u | u) - 8388736.f; };

  const long long stride = gridDim.x * 8LL;
  long long tile = blockIdx.x * 8LL + warp;
  // Two tiles in flight per warp beyond the one being converted.
  uint4 v_cur = make_uint4(0, 0, 0, 0), v_nxt = make_uint4(0, 0, 0, 0);
  uint32_t m_cur[4] = {0, 0, 0, 0}, m_nxt[4] = {0, 0, 0, 0};
  if (tile < tiles) fetch(tile, &v_cur, m_cur);
  if (tile + stride < tiles) fetch(tile + stride, &v_nxt, m_nxt);
  for (; tile < tiles; tile += stride) {
    uint4 v_next = make_uint4(0, 0, 0, 0);
    uint32_t m_next[4] = {0, 0, 0, 0};
    if (tile + 2 * stride < tiles) fetch(tile + 2 * stride, &v_next, m_next);
    const long long gt = tile + static_cast<long long>(nt0) * chunks_per_row;
    const int nt = static_cast<int>(gt / chunks_per_row), c = static_cast<int>(gt % chunks_per_row);
    // Row scales / offsets: [half][row g, row g + 8].
    float sc[2][2], of[2][2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (BITS == 4) {
        const __half2 m = *reinterpret_cast<const __half2*>(&m_cur[i]);
        const float s = __low2float(m), h = __high2float(m);
        sc[i / 2][i % 2] = s;
        of[i / 2][i % 2] = p.zero_point ? -h * s : h;
      } else {
        const uint16_t b = static_cast<uint16_t>(m_cur[i]);
        sc[i / 2][i % 2] = __half2float(*reinterpret_cast<const __half*>(&b));
        of[i / 2][i % 2] = 0.f;
      }
    }
    __syncwarp();
    const uint32_t w4[4] = {v_cur.x, v_cur.y, v_cur.z, v_cur.w};
    if constexpr (BITS == 4) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int hf = s / 2;
        const uint32_t w = w4[s];
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // register R_r: rows g (r even) / g + 8 (r odd), columns +0 / +8
          const int rr = r & 1;
          const float qlo = code_f((w >> (4 * r)) & 0xFu), qhi = code_f((w >> (4 * r + 16)) & 0xFu);
          const uint32_t val = pack(fmaf(qlo, sc[hf][rr], of[hf][rr]), fmaf(qhi, sc[hf][rr], of[hf][rr]));
          const int row = g + 8 * rr, col = s * 16 + 2 * t + 8 * (r >> 1);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sh_addr + (row * kPitch + col) * 2), "r"(val));
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint32_t w = w4[2 * s + r / 2];
          const int sh8 = 16 * (r % 2);
          const int rr = r & 1;
          const float qlo = code8_f((w >> sh8) & 0xFFu), qhi = code8_f((w >> (sh8 + 8)) & 0xFFu);
          const uint32_t val = pack(qlo * sc[0][rr], qhi * sc[0][rr]);
          const int row = g + 8 * rr, col = s * 16 + 2 * t + 8 * (r >> 1);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sh_addr + (row * kPitch + col) * 2), "r"(val));
        }
      }
    }
    v_cur = v_nxt;
    v_nxt = v_next;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      m_cur[i] = m_nxt[i];
      m_nxt[i] = m_next[i];
    }
    __syncwarp();
    // Write back: 16 rows x kChunk columns = 16 * kChunk / 8 pieces of 16 bytes, 32 per pass.
    constexpr int kPiecesPerRow = kChunk / 8;
#pragma unroll
    for (int pass = 0; pass < 16 * kPiecesPerRow / 32; ++pass) {
      const int idx = pass * 32 + lane;
      const int r = idx / kPiecesPerRow, part = idx % kPiecesPerRow;
      const int row = nt * 16 + r, col = c * kChunk + part * 8;
      if (row >= p.row_end || col >= p.k) continue;
      const uint4 o = *reinterpret_cast<const uint4*>(sh + r * kPitch + part * 8);
      const size_t base = static_cast<size_t>(row - p.row_begin) * p.k + col;
      if (vec) {
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + base) = o;
      } else {
        const uint16_t* ov = reinterpret_cast<const uint16_t*>(&o);
        for (int i = 0; i < 8 && col + i < p.k; ++i) static_cast<uint16_t*>(p.out)[base + i] = ov[i];
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
  int dev = 0, sms = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  QDEC_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const void* func = p.bits == 4 ? (p.out_bf16 ? reinterpret_cast<const void*>(&dequant_kernel<4, true>)
                                                : reinterpret_cast<const void*>(&dequant_kernel<4, false>))
                                  : (p.out_bf16 ? reinterpret_cast<const void*>(&dequant_kernel<8, true>)
                                                : reinterpret_cast<const void*>(&dequant_kernel<8, false>));
  // One resident wave (a grid-stride loop over the tiles): no tail of late CTAs.
  int per_sm = 0;
  QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, 256, 0));
  const long long blocks =
      std::max<long long>(1, std::min<long long>((tiles + 7) / 8, static_cast<long long>(std::max(1, per_sm)) * sms));
  DequantParams args = p;
  void* argv[] = {&args};
  QDEC_CUDA_RETURN(cudaLaunchKernel(func, dim3(static_cast<unsigned>(blocks)), dim3(256), argv, 0, stream));
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
