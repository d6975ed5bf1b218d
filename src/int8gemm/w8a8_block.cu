// W8A8 per K-block, seed 003 (qdec/w8a8_gemm.h, w8a8_block_gemm): both operands quantized per block of L
// (32 / 64 / 128) along K with a scale and an offset, value = s * q + o. Per block i:
//   y += sA sB C_i + sA oB SA_i + oA sB SB_i + L oA oB     (C_i int32 block dot product, SA / SB block code sums)
//
//   A [M, lda] int8 + [M, K / L] scale, offset, block_sum;  B [N, ldb] likewise;  Y [M, ldy] bf16/fp16/fp32.
//
// A CTA (4 warps) owns 32 output channels x 16 * kMT rows; warp w takes blocks w, w + 4, ... Within a block each
// lane loads 8 contiguous bytes per row and k-step (one mma.m16n8k32.s8 covers exactly 32 contiguous K, so no
// k-step straddles two blocks), the block's int32 tile is turned into fp32 with the four terms at once, and the
// warps' fp32 tiles are summed through shared memory in warp order (deterministic). Correctness first: no
// split-K, no pipelining (docs/int8_gemm.md has its speed).
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "int8gemm/w8a8_common.cuh"
#include "qdec/int8_quant.h"
#include "qdec/w8a8_gemm.h"
#include "runtime/cuda_check.h"

namespace qdec {
namespace w8a8 {
namespace {

constexpr int kBlkWarps = 4;
constexpr int kBlkTileN = 32;

struct BlockGemmArgs {
  int m, n, k, block;
  const int8_t* aq;
  long long lda;
  const float* as;
  const float* ao;
  const int32_t* asum;
  const int8_t* bq;
  long long ldb;
  const float* bs;
  const float* bo;
  const int32_t* bsum;
  const float* bias;
  void* y;
  long long ldy;
  int y_dtype;
};

// grid (M slices, N tiles). kMT: m16 tiles per CTA. kL: the block length.
template <int kMT, int kL>
__global__ void __launch_bounds__(kBlkWarps * 32) w8a8_block_kernel(const BlockGemmArgs a) {
  __shared__ float red[kBlkWarps][kMT * 16][kBlkTileN];
  const int m0 = blockIdx.x * kMT * 16, n0 = blockIdx.y * kBlkTileN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int nb = a.k / kL;

  // This lane's rows (2 per m tile) and columns (2 per n tile), clamped into the matrices (results discarded).
  int rows[kMT][2], cols[4][2];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) rows[i][h] = min(m0 + 16 * i + 8 * h + g, a.m - 1);
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) cols[j][c] = min(n0 + 8 * j + 2 * t4 + c, a.n - 1);
  // Loads use the row of the B fragment: column g of each n8 tile.
  const int8_t* brow[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) brow[j] = a.bq + size_t(min(n0 + 8 * j + g, a.n - 1)) * a.ldb + t4 * 8;
  const int8_t* arow[kMT][2];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) arow[i][h] = a.aq + size_t(rows[i][h]) * a.lda + t4 * 8;

  float f[kMT][4][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) f[i][j][c] = 0.0f;

  for (int blk = warp; blk < nb; blk += kBlkWarps) {
    int acc[kMT][4][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0;
#pragma unroll
    for (int s = 0; s < kL / 32; ++s) {
      const int kb = blk * kL + s * 32;
      uint2 bv[4], av[kMT][2];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = __ldg(reinterpret_cast<const uint2*>(brow[j] + kb));
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) av[i][h] = __ldg(reinterpret_cast<const uint2*>(arow[i][h] + kb));
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_s8(acc[i][j], av[i][0].x, av[i][1].x, av[i][0].y, av[i][1].y, bv[j].x, bv[j].y);
    }
    // The four terms of the block, per output element.
    float sa[kMT][2], oa[kMT][2], suma[kMT][2], sb[4][2], ob[4][2], sumb[4][2];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const size_t mi = size_t(rows[i][h]) * nb + blk;
        sa[i][h] = a.as[mi], oa[i][h] = a.ao[mi], suma[i][h] = float(a.asum[mi]);
      }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const size_t ni = size_t(cols[j][c]) * nb + blk;
        sb[j][c] = a.bs[ni], ob[j][c] = a.bo[ni], sumb[j][c] = float(a.bsum[ni]);
      }
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int h = c / 2, cc = c % 2;
          const float t = sa[i][h] * sb[j][cc] * float(acc[i][j][c]) + sa[i][h] * ob[j][cc] * suma[i][h] +
                          oa[i][h] * sb[j][cc] * sumb[j][cc] + float(kL) * oa[i][h] * ob[j][cc];
          f[i][j][c] += t;
        }
  }

#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) red[warp][16 * i + g + 8 * (c / 2)][8 * j + 2 * t4 + (c % 2)] = f[i][j][c];
  __syncthreads();
  for (int e = threadIdx.x; e < kMT * 16 * kBlkTileN; e += kBlkWarps * 32) {
    const int r = e / kBlkTileN, col = e % kBlkTileN, row = m0 + r, n = n0 + col;
    if (row >= a.m || n >= a.n) continue;
    float v = red[0][r][col];
#pragma unroll
    for (int w = 1; w < kBlkWarps; ++w) v += red[w][r][col];
    if (a.bias) v += a.bias[n];
    store_y(a.y, a.ldy, a.y_dtype, row, n, v);
  }
}

Status invalid(const std::string& msg) {
  return Status(StatusCode::kInvalidArgument, "w8a8_block_gemm: " + msg);
}
bool aligned(const void* p, size_t al) {
  return reinterpret_cast<uintptr_t>(p) % al == 0;
}

Status check_operand(const char* name, const Int8BlockView& v, long long* ld) {
  const std::string nm(name);
  if (v.rows < 1 || v.rows > kW8A8MaxN)
    return invalid(nm + " rows " + std::to_string(v.rows) + " is outside 1.." + std::to_string(kW8A8MaxN));
  if (v.block != 32 && v.block != 64 && v.block != 128)
    return invalid(nm + " block " + std::to_string(v.block) + " is not supported (32, 64, 128)");
  if (v.k < v.block || v.k > kInt8GemmMaxK || v.k % v.block != 0)
    return invalid(nm + " K " + std::to_string(v.k) + " is not a multiple of the block " + std::to_string(v.block) +
                   " in " + std::to_string(v.block) + ".." + std::to_string(kInt8GemmMaxK));
  if (!v.q || !aligned(v.q, 16)) return invalid(nm + ".q is null or not 16-byte aligned");
  const long long l = v.ld ? v.ld : v.k;
  if (l < v.k || l % 16 != 0)
    return invalid(nm + ".ld " + std::to_string(l) + " must be >= K " + std::to_string(v.k) + " and a multiple of 16");
  if (!v.scale || !v.offset || !v.block_sum || !aligned(v.scale, 4) || !aligned(v.offset, 4) ||
      !aligned(v.block_sum, 4))
    return invalid(nm + ".scale / offset / block_sum is null or not 4-byte aligned");
  *ld = l;
  return Status::Ok();
}

}  // namespace
}  // namespace w8a8

Status w8a8_block_gemm(const W8A8BlockParams& p, cudaStream_t stream) {
  using namespace w8a8;
  long long lda = 0, ldb = 0;
  QDEC_RETURN_IF_ERROR(check_operand("a", p.a, &lda));
  QDEC_RETURN_IF_ERROR(check_operand("b", p.b, &ldb));
  if (p.a.k != p.b.k)
    return invalid("activation K " + std::to_string(p.a.k) + " does not match weight K " + std::to_string(p.b.k));
  if (p.a.block != p.b.block)
    return invalid("blocks " + std::to_string(p.a.block) + " and " + std::to_string(p.b.block) + " differ");
  if (p.bias && !aligned(p.bias, 4)) return invalid("bias is not 4-byte aligned");
  if (p.y_dtype != GemmDType::kBF16 && p.y_dtype != GemmDType::kFP16 && p.y_dtype != GemmDType::kFP32)
    return invalid("y dtype " + std::to_string(int(p.y_dtype)) + " is not bf16, fp16 or fp32");
  if (!p.y || !aligned(p.y, p.y_dtype == GemmDType::kFP32 ? 4 : 2))
    return invalid("y is null or not aligned to its element size");
  const int m = p.a.rows, n = p.b.rows;
  const long long ldy = p.ldy ? p.ldy : n;
  if (ldy < n) return invalid("ldy " + std::to_string(ldy) + " < N " + std::to_string(n));
  const int mt = m <= 16 ? 1 : 2;
  const long long mslices = (m + 16 * mt - 1) / (16 * mt), ntiles = (n + kBlkTileN - 1) / kBlkTileN;
  if (mslices > 65535 || ntiles > 65535) return invalid("M / N give a grid beyond 65535 tiles");
  BlockGemmArgs a{m,     n,   p.a.k,     p.a.block,  p.a.q,         lda,    p.a.scale, p.a.offset, p.a.block_sum,
                  p.b.q, ldb, p.b.scale, p.b.offset, p.b.block_sum, p.bias, p.y,       ldy,        int(p.y_dtype)};
  const dim3 grid(static_cast<unsigned>(mslices), static_cast<unsigned>(ntiles));
  // Dispatch list: kMT {1, 2} x block {32, 64, 128}.
  auto go = [&](auto mt_tag) {
    constexpr int MT = decltype(mt_tag)::value;
    if (p.a.block == 32) {
      w8a8_block_kernel<MT, 32><<<grid, kBlkWarps * 32, 0, stream>>>(a);
    } else if (p.a.block == 64) {
      w8a8_block_kernel<MT, 64><<<grid, kBlkWarps * 32, 0, stream>>>(a);
    } else {
      w8a8_block_kernel<MT, 128><<<grid, kBlkWarps * 32, 0, stream>>>(a);
    }
  };
  if (mt == 1) {
    go(std::integral_constant<int, 1>{});
  } else {
    go(std::integral_constant<int, 2>{});
  }
  return cuda_status(cudaGetLastError(), "w8a8 block kernel launch");
}

}  // namespace qdec
