// Dequantization of a packed weight into a dense bf16/fp16 [N, K] matrix (the large-M path: the scratch is then
// the A operand of a cuBLASLt GEMM, docs/gemm.md), and the bias/clamp epilogue of that path.
//
// codes: tiles of 16 rows x C columns (C = 64 int4, 32 int8), 512 bytes each, row block nt's tiles consecutive
// along K (docs/formats.md); meta: [num_groups][n_pad] entries; out: [row_end - row_begin, k] row-major.
// One warp per unit of kUnit consecutive tiles of one row block: kUnit coalesced 16-byte loads per lane issued
// together, conversion in registers (code -> fp32 exactly through the 2^23 magic number placed by one byte
// permute, one FMA with the row's scale and offset, one packed rounding to 16 bits), a conflict-free shared
// transpose of each tile to row order, 16-byte row-contiguous stores. Values are q * s + o in fp32 with one
// rounding to 16 bits (int4-zp: q * s + (-(z * s)); int8: q * s). Warps walk units with a stride of the whole
// grid (one resident wave) and step their (row block, unit) position without divisions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "gemm/dequant_kernel.cuh"
#include "gemm/fused_kernel.cuh"
#include "runtime/cuda_check.h"

namespace qdec::wq {
namespace {

// Tiles per warp unit (512 bytes of codes each, all requested at once): 2 for int4 (each tile expands to 2 KiB
// of output), 4 for int8 (1 KiB); more int4 tiles per unit spill at the 64-register cap.
template <int BITS>
constexpr int kUnit = BITS == 4 ? 2 : 4;
constexpr int kDqWarps = 8;    // warps per CTA
constexpr int kMinBlocks = 4;  // CTAs per SM the register budget must allow (64 registers)

// Exact fp32 value of byte b (0..3) of x: 0x4B0000xx is 2^23 + x, so the subtraction is exact.
__device__ __forceinline__ float byte_f(uint32_t x, uint32_t sel) {
  return __uint_as_float(__byte_perm(x, 0x4B000000u, sel)) - 8388608.f;
}
// Exact q of an int8 byte u = q + 128 (byte b of x).
__device__ __forceinline__ float byte_q8(uint32_t x, uint32_t sel) {
  return __uint_as_float(__byte_perm(x, 0x4B000000u, sel)) - 8388736.f;
}
// Selector of byte b into bits 0..7, zero bytes 1 and 2, 0x4B into byte 3 (the exponent of 2^23).
constexpr uint32_t kSel0 = 0x7540, kSel1 = 0x7541, kSel2 = 0x7542, kSel3 = 0x7543;

template <bool BF16>
__device__ __forceinline__ uint32_t pack16(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

__device__ __forceinline__ void st_shared32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

// BITS: 4 (int4 / int4-zp, 64 columns per tile) or 8 (int8, 32 columns). BF16: output bf16 (else fp16).
template <int BITS, bool BF16>
__global__ void __launch_bounds__(kDqWarps * 32, kMinBlocks) dequant_kernel(const __grid_constant__ DequantParams p) {
  constexpr int kC = BITS == 4 ? 64 : 32;  // columns per tile
  constexpr int kPitch = kC + 8;           // halves per shared row: rows 16 bytes apart in banks
  __shared__ __align__(16) uint16_t tile_sh[kDqWarps][16 * kPitch];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int cpr = p.k_pad / kC;                           // tiles per row block
  const int upr = (cpr + kUnit<BITS> - 1) / kUnit<BITS>;  // units per row block
  const int nt0 = p.row_begin / 16, nt1 = (p.row_end + 15) / 16;
  const int num_groups = (p.k + p.group_k - 1) / p.group_k;
  const int gshift = 31 - __clz(p.group_k);  // group_k is a power of two when num_groups > 1 (launcher)
  // Both halves of a tile in one group: per channel, or groups of >= C columns (int8: always).
  const bool one_group_per_tile = BITS == 8 || num_groups == 1 || p.group_k >= kC;
  const bool vec = (p.k % 8) == 0;
  const uint32_t sh_addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile_sh[warp]));
  const uint16_t* sh = tile_sh[warp];
  uint16_t* out = static_cast<uint16_t*>(p.out);

  // Position of this warp and the grid stride as (row blocks, units): one 64-bit division per warp.
  const long long wid = blockIdx.x * static_cast<long long>(kDqWarps) + warp;
  const long long nwarps = static_cast<long long>(gridDim.x) * kDqWarps;
  if (wid >= static_cast<long long>(nt1 - nt0) * upr) return;
  int nt = nt0 + static_cast<int>(wid / upr), cu = static_cast<int>(wid % upr);
  const long long step_n = nwarps / upr;  // may exceed the row blocks: the loop ends at once
  const int step_c = static_cast<int>(nwarps % upr);

  auto grp_of = [&](int col) { return num_groups == 1 ? 0 : min(num_groups - 1, col >> gshift); };

  while (nt < nt1) {
    const int c0 = cu * kUnit<BITS>;
    const int nj = min(kUnit<BITS>, cpr - c0);
    // Codes of the unit, all requested before any is used (streamed: read once).
    const uint4* src = reinterpret_cast<const uint4*>(p.codes + (static_cast<size_t>(nt) * cpr + c0) * 512) + lane;
    uint4 v[kUnit<BITS>];
#pragma unroll
    for (int j = 0; j < kUnit<BITS>; ++j) v[j] = j < nj ? __ldcs(src + 32 * j) : make_uint4(0, 0, 0, 0);
    // Meta of rows g, g + 8 for the groups of each tile's two column halves.
    uint32_t m[kUnit<BITS>][2][2];
    const size_t row_e = static_cast<size_t>(nt) * 16 + g;
#pragma unroll
    for (int j = 0; j < kUnit<BITS>; ++j) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        if (hf == 1 && one_group_per_tile) {
          m[j][1][0] = m[j][0][0];
          m[j][1][1] = m[j][0][1];
          continue;
        }
        const size_t e = static_cast<size_t>(grp_of((c0 + j) * kC + hf * (kC / 2))) * p.n_pad + row_e;
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          if (j < nj) {
            if constexpr (BITS == 4) {
              m[j][hf][rr] = __ldg(reinterpret_cast<const uint32_t*>(p.meta) + e + 8 * rr);
            } else {
              m[j][hf][rr] = __ldg(reinterpret_cast<const uint16_t*>(p.meta) + e + 8 * rr);
            }
          } else {
            m[j][hf][rr] = 0;
          }
        }
      }
    }
    const int row0 = nt * 16;
    uint16_t* out_unit = out + static_cast<size_t>(row0 - p.row_begin) * p.k;

#pragma unroll
    for (int j = 0; j < kUnit<BITS>; ++j) {
      if (j >= nj) break;
      // Row scales / offsets of this tile: [half][row g, row g + 8].
      float sc[2][2], of[2][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hf = i / 2, rr = i % 2;
        if constexpr (BITS == 4) {
          const __half2 mh = *reinterpret_cast<const __half2*>(&m[j][hf][rr]);
          const float s = __low2float(mh), h = __high2float(mh);
          sc[hf][rr] = s;
          of[hf][rr] = p.zero_point ? -h * s : h;
        } else {
          const uint16_t b = static_cast<uint16_t>(m[j][hf][rr]);
          sc[hf][rr] = __half2float(*reinterpret_cast<const __half*>(&b));
          of[hf][rr] = 0.f;
        }
      }
      const uint32_t w4[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
      if constexpr (BITS == 4) {
        // Word s = k-step s: nibble r (bits 4r) and r + 4 (bits 4r + 16) are register R_r's (lo, hi): rows g
        // (r even) / g + 8 (r odd), columns 2t (r < 2) / 2t + 8 (r >= 2). Even nibbles land in the bytes of
        // w & 0x0F0F0F0F (R0.lo, R2.lo, R0.hi, R2.hi), odd ones in (w >> 4) & 0x0F0F0F0F (R1, R3 likewise).
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const int hf = s / 2;
          const uint32_t we = w4[s] & 0x0F0F0F0Fu, wo = (w4[s] >> 4) & 0x0F0F0F0Fu;
          const int col = s * 16 + 2 * t;
          const uint32_t r0 = pack16<BF16>(fmaf(byte_f(we, kSel0), sc[hf][0], of[hf][0]),
                                           fmaf(byte_f(we, kSel2), sc[hf][0], of[hf][0]));
          const uint32_t r2 = pack16<BF16>(fmaf(byte_f(we, kSel1), sc[hf][0], of[hf][0]),
                                           fmaf(byte_f(we, kSel3), sc[hf][0], of[hf][0]));
          const uint32_t r1 = pack16<BF16>(fmaf(byte_f(wo, kSel0), sc[hf][1], of[hf][1]),
                                           fmaf(byte_f(wo, kSel2), sc[hf][1], of[hf][1]));
          const uint32_t r3 = pack16<BF16>(fmaf(byte_f(wo, kSel1), sc[hf][1], of[hf][1]),
                                           fmaf(byte_f(wo, kSel3), sc[hf][1], of[hf][1]));
          st_shared32(sh_addr + (g * kPitch + col) * 2, r0);
          st_shared32(sh_addr + (g * kPitch + col + 8) * 2, r2);
          st_shared32(sh_addr + ((g + 8) * kPitch + col) * 2, r1);
          st_shared32(sh_addr + ((g + 8) * kPitch + col + 8) * 2, r3);
        }
      } else {
        // Words 2s, 2s + 1 = k-step s: bytes (0, 1) / (2, 3) of word 2s are rows g / g + 8 at columns 2t, 2t + 1;
        // word 2s + 1 the same at columns 2t + 8, 2t + 9. A byte u is q + 128.
#pragma unroll
        for (int s = 0; s < 2; ++s) {
#pragma unroll
          for (int h8 = 0; h8 < 2; ++h8) {
            const uint32_t w = w4[2 * s + h8];
            const int col = s * 16 + 2 * t + 8 * h8;
            const uint32_t lo = pack16<BF16>(byte_q8(w, kSel0) * sc[0][0], byte_q8(w, kSel1) * sc[0][0]);
            const uint32_t hi = pack16<BF16>(byte_q8(w, kSel2) * sc[0][1], byte_q8(w, kSel3) * sc[0][1]);
            st_shared32(sh_addr + (g * kPitch + col) * 2, lo);
            st_shared32(sh_addr + ((g + 8) * kPitch + col) * 2, hi);
          }
        }
      }
      __syncwarp();
      // Write back: 16 rows x kC columns = 16 * kC / 8 pieces of 16 bytes, 32 per pass (C / 8 lanes per row).
      constexpr int kPiecesPerRow = kC / 8;
      const int col0 = (c0 + j) * kC;
#pragma unroll
      for (int pass = 0; pass < 16 * kPiecesPerRow / 32; ++pass) {
        const int idx = pass * 32 + lane;
        const int r = idx / kPiecesPerRow, part = idx % kPiecesPerRow;
        const int col = col0 + part * 8;
        if (row0 + r >= p.row_end || col >= p.k) continue;
        const uint4 o = *reinterpret_cast<const uint4*>(sh + r * kPitch + part * 8);
        uint16_t* dst = out_unit + static_cast<size_t>(r) * p.k + col;
        if (vec) {
          *reinterpret_cast<uint4*>(dst) = o;
        } else {
          const uint32_t ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (col + i < p.k) dst[i] = static_cast<uint16_t>(ow[i / 2] >> (16 * (i % 2)));
          }
        }
      }
      __syncwarp();
    }
    // Next unit: the grid stride in (row blocks, units), carried without division.
    cu += step_c;
    if (cu >= upr) {
      cu -= upr;
      ++nt;
    }
    if (step_n >= nt1 - nt) break;
    nt += static_cast<int>(step_n);
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
  auto bad = [](const std::string& what) { return Status(StatusCode::kInvalidArgument, "launch_dequant: " + what); };
  if (p.bits != 4 && p.bits != 8) return bad("bits " + std::to_string(p.bits) + " is not 4 or 8");
  const int chunk = p.bits == 4 ? 64 : 32;
  if (p.n < 1 || p.k < 1 || p.n_pad < p.n || p.n_pad % 16 != 0 || p.k_pad < p.k || p.k_pad % chunk != 0)
    return bad("n " + std::to_string(p.n) + " / n_pad " + std::to_string(p.n_pad) + " / k " + std::to_string(p.k) +
               " / k_pad " + std::to_string(p.k_pad) + " are not a packed layout");
  if (p.row_begin < 0 || p.row_begin % 16 != 0 || p.row_end <= p.row_begin || p.row_end > p.n)
    return bad("rows [" + std::to_string(p.row_begin) + ", " + std::to_string(p.row_end) + ") of N " +
               std::to_string(p.n));
  const int num_groups = p.group_k < 1 ? 0 : (p.k + p.group_k - 1) / p.group_k;
  if (p.group_k < 1 || (num_groups > 1 && (p.group_k & (p.group_k - 1)) != 0))
    return bad("group_k " + std::to_string(p.group_k) + " is not K or a power of two");
  if (!p.codes || !p.meta || !p.out) return bad("null pointer");
  const long long tiles_per_row = p.k_pad / chunk;
  const int unit = p.bits == 4 ? kUnit<4> : kUnit<8>;
  const long long units =
      static_cast<long long>((p.row_end + 15) / 16 - p.row_begin / 16) * ((tiles_per_row + unit - 1) / unit);
  int dev = 0, sms = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  QDEC_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const void* func = p.bits == 4 ? (p.out_bf16 ? reinterpret_cast<const void*>(&dequant_kernel<4, true>)
                                               : reinterpret_cast<const void*>(&dequant_kernel<4, false>))
                                 : (p.out_bf16 ? reinterpret_cast<const void*>(&dequant_kernel<8, true>)
                                               : reinterpret_cast<const void*>(&dequant_kernel<8, false>));
  // One resident wave (a grid-stride loop over the tiles): no tail of late CTAs.
  int per_sm = 0;
  QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, kDqWarps * 32, 0));
  const long long blocks = std::max<long long>(
      1, std::min<long long>((units + kDqWarps - 1) / kDqWarps, static_cast<long long>(std::max(1, per_sm)) * sms));
  DequantParams args = p;
  void* argv[] = {&args};
  QDEC_CUDA_RETURN(cudaLaunchKernel(func, dim3(static_cast<unsigned>(blocks)), dim3(kDqWarps * 32), argv, 0, stream));
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
