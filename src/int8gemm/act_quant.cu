// Activation quantization kernels (qdec/act_quant.h): per-token symmetric int8, fused RMSNorm + per-token int8,
// and seed 003's per-K-block asymmetric int8. Bit-exact with qdec/int8_quant.h.
//
//   X [m, ldx] (bf16 / fp16; fp32 too for the block quantizer) -> q [m, ldq] int8 + per-row (or per-block) meta
//
// Design: rows that are 16-byte aligned with K a multiple of 8 and K <= kActQuantRegisterMaxK (every model
// shape) go to the streaming kernel: a resident grid of CTAs (32 to 512 threads by K) walks the rows, each
// thread holding 2 to 8 vectors of 8 elements as fp32 and the next row's vectors in flight; the quantizer there is the
// IEEE quotient computed with a hoisted reciprocal (see act_quant_stream_kernel). Other rows (odd K, unaligned X,
// longer K) run one CTA per row (act_quant_row_kernel), element loads where needed; rows longer than
// kActQuantRegisterMaxK loop over the row per pass (the later passes hit L2). The reductions (sum of squares in
// float64, amax, code sum) are warp shuffles or REDUX plus one shared-memory step. Every rounding step is an
// explicit _rn intrinsic so that no contraction or fast-math flag can change a bit: the CPU does the same
// operations one IEEE rounding at a time. The block quantizer gives each K-block to L/8 adjacent lanes (8
// elements each): the block's min / max are reduced by shuffles with the CPU's tie rule (first index wins, which
// only matters for -0 versus +0).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "int8gemm/act_quant_internal.h"
#include "qdec/act_quant.h"
#include "runtime/cuda_check.h"
#include "runtime/ptx.cuh"

namespace qdec {
namespace {

// ---- element loads ----------------------------------------------------------------------------------------------

// kDType: 0 bf16, 1 fp16, 2 fp32 (GemmDType order).
template <int kDType>
__device__ __forceinline__ float elem_to_float(const void* row, int e) {
  if constexpr (kDType == 0) {
    return __bfloat162float(__ushort_as_bfloat16(static_cast<const unsigned short*>(row)[e]));
  } else if constexpr (kDType == 1) {
    return __half2float(__ushort_as_half(static_cast<const unsigned short*>(row)[e]));
  } else {
    return static_cast<const float*>(row)[e];
  }
}

__device__ __forceinline__ void unpack16(const uint4& u, int kDType, float* v) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned short lo = static_cast<unsigned short>(w[i] & 0xFFFF), hi = static_cast<unsigned short>(w[i] >> 16);
    if (kDType == 0) {
      v[2 * i] = __bfloat162float(__ushort_as_bfloat16(lo));
      v[2 * i + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
    } else {
      v[2 * i] = __half2float(__ushort_as_half(lo));
      v[2 * i + 1] = __half2float(__ushort_as_half(hi));
    }
  }
}

// Elements e .. e + 7 of a row as fp32; those at or beyond k read as 0 (neutral for every reduction here, and
// never stored). vec: the row is 16-byte aligned at every multiple of 8 elements.
template <int kDType>
__device__ __forceinline__ void load8(const void* row, int e, int k, bool vec, float (&v)[8]) {
  if (vec && e + 8 <= k) {
    if constexpr (kDType == 2) {
      const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + e);
      const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + e + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
      const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(row) + e);
      unpack16(u, kDType, v);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = e + i < k ? elem_to_float<kDType>(row, e + i) : 0.0f;
  }
}

// Codes e .. e + 7 (those below k): one 8-byte store when all eight are in the row (q rows are 16-byte aligned and
// e is a multiple of 8).
__device__ __forceinline__ void store8(int8_t* row, int e, int k, const int (&c)[8]) {
  if (e + 8 <= k) {
    uint2 u;
    u.x = (uint32_t(c[0]) & 0xFF) | ((uint32_t(c[1]) & 0xFF) << 8) | ((uint32_t(c[2]) & 0xFF) << 16) |
          (uint32_t(c[3]) << 24);
    u.y = (uint32_t(c[4]) & 0xFF) | ((uint32_t(c[5]) & 0xFF) << 8) | ((uint32_t(c[6]) & 0xFF) << 16) |
          (uint32_t(c[7]) << 24);
    *reinterpret_cast<uint2*>(row + e) = u;
  } else {
    for (int i = 0; i < 8 && e + i < k; ++i) row[e + i] = static_cast<int8_t>(c[i]);
  }
}

// ---- reductions -------------------------------------------------------------------------------------------------

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// All threads get the result. Sums of doubles: a fixed tree (warp xor shuffles, then warp 0 over the warps).
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* smem /* [32] */) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  __syncthreads();  // smem may still be read by a previous reduction
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  T r = smem[0];
  for (int w = 1; w < nwarps; ++w) r = op(r, smem[w]);
  return r;
}

// rint(x / s) with x / s the IEEE fp32 quotient, computed from t = x * inv (inv = 1 / s rounded): IEEE division
// is a long instruction sequence, and once per element it made these kernels compute-bound. t is within 2^-23
// relative of x / s and the rounded quotient within 2^-24, and every quotient here is at most ~128 in magnitude, so
// t and the quotient round to the same integer unless they lie within ~3e-5 of a half-integer: those (a fraction
// 2e-3 of the elements, by the 1e-3 margin) take the division. inv is infinite for s below 2^-128: division.
__device__ __forceinline__ float rint_div(float x, float s, float inv) {
  const float t = __fmul_rn(x, inv);
  const float frac = fabsf(t - truncf(t));  // exact
  if (fabsf(frac - 0.5f) < 1e-3f || isinf(inv)) return rintf(__fdiv_rn(x, s));
  return rintf(t);
}

// The per-token symmetric quantizer of one value: q = clamp(rint(y / s), -127, 127), NaN -> 0, s == 0 -> 0.
__device__ __forceinline__ int quant_sym(float y, float s, float inv) {
  if (s == 0.0f || isnan(y)) return 0;
  return static_cast<int>(fminf(fmaxf(rint_div(y, s, inv), -127.0f), 127.0f));
}

struct RowArgs {
  int m, k;
  const void* x;
  long long ldx;
  int8_t* q;
  long long ldq;
  float* scale;
  int32_t* row_sum;
  const void* weight;  // RMSNorm only
  float eps;
  int vec;       // 1: X rows and weight are 16-byte aligned (16-byte loads)
  double inv_k;  // RN(1 / k), for the streaming kernel's ms
  int pdl = 0;   // streaming kernel launched as a programmatic dependent (ActQuantParams::pdl)
};

// The RMSNorm sum of squares of one 8-element vector (zeros past K), as qdec/int8_quant.h specifies it: an fp32 FMA
// chain (x^2 is exact in fp32 for every fp16 x and every bf16 x of magnitude 2^-63 or more), or the float64 sum where
// the chain is not finite (an x^2 past the fp32 range, or a non-finite x; rare). Session 28: with a float64 FMA per
// element (and its F2F) the streaming kernel took 3% longer on the H200 over bench_int8's 12 RMSNorm shapes, 4096 x
// 4096 78% of the copy ceiling against 81% (docs/int8_gemm.md).
__device__ __forceinline__ double chunk_ss_f64_inline(const float (&x)[8]) {
  double d = 0.0;
#pragma unroll
  for (int i = 0; i < 8; ++i) d = __dadd_rn(d, __dmul_rn(double(x[i]), double(x[i])));
  return d;
}
__device__ __noinline__ double chunk_ss_f64(float x0, float x1, float x2, float x3, float x4, float x5, float x6,
                                            float x7) {
  const float x[8] = {x0, x1, x2, x3, x4, x5, x6, x7};
  return chunk_ss_f64_inline(x);
}
// kOutline: the float64 fallback out of line (the streaming kernel's registers), else in line (the one-CTA-per-row
// kernel, where the call cost a spill).
template <bool kOutline>
__device__ __forceinline__ double chunk_ss(const float (&x)[8]) {
  float p = __fmul_rn(x[0], x[0]);
#pragma unroll
  for (int i = 1; i < 8; ++i) p = __fmaf_rn(x[i], x[i], p);
  if (isfinite(p)) return double(p);
  if constexpr (kOutline) return chunk_ss_f64(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
  return chunk_ss_f64_inline(x);
}

// One CTA per row. kVpt > 0: the row (and the normalized row) lives in kVpt 8-element vectors per thread;
// kVpt == 0: every pass loops over the row in global memory.
// kDType: 0 bf16, 1 fp16. kNorm: RMSNorm before the quantizer.
template <int kDType, bool kNorm, int kVpt>
__global__ void __launch_bounds__(512) act_quant_row_kernel(const RowArgs a) {
  __shared__ double smem_d[32];
  __shared__ float smem_f[32];
  __shared__ int smem_i[32];
  const int row = blockIdx.x;
  const void* xr = static_cast<const char*>(a.x) + size_t(row) * a.ldx * 2;
  int8_t* qr = a.q + size_t(row) * a.ldq;
  const int nvec = (a.k + 7) / 8;
  const int stride = blockDim.x;
  const bool vec = a.vec != 0;

  constexpr int kCache = kVpt > 0 ? kVpt : 1;
  float v[kCache][8];
  if constexpr (kVpt > 0) {
#pragma unroll
    for (int j = 0; j < kVpt; ++j) {
      const int vi = threadIdx.x + j * stride;
      if (vi < nvec) {
        load8<kDType>(xr, vi * 8, a.k, vec, v[j]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[j][i] = 0.0f;
      }
    }
  }
  // Visits each of this thread's vectors: f(vector index, values). In loop mode the values are re-read.
  auto for_each_vec = [&](auto&& f) {
    if constexpr (kVpt > 0) {
#pragma unroll
      for (int j = 0; j < kVpt; ++j) {
        const int vi = threadIdx.x + j * stride;
        if (vi < nvec) f(vi, v[j]);
      }
    } else {
      for (int vi = threadIdx.x; vi < nvec; vi += stride) {
        load8<kDType>(xr, vi * 8, a.k, vec, v[0]);
        f(vi, v[0]);
      }
    }
  };

  float r = 1.0f;
  if constexpr (kNorm) {
    double ss = 0.0;
    for_each_vec([&](int, const float(&x)[8]) { ss = __dadd_rn(ss, chunk_ss<false>(x)); });
    ss = block_reduce(ss, SumOp{}, smem_d);
    const float ms = __double2float_rn(__ddiv_rn(ss, double(a.k)));
    r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, a.eps)));
  }
  // y = (x * r) * w, two fp32 roundings (the CPU's order); computed in place in register mode.
  auto normalize = [&](int vi, float(&x)[8]) {
    if constexpr (kNorm) {
      float w[8];
      load8<kDType>(a.weight, vi * 8, a.k, vec, w);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = __fmul_rn(__fmul_rn(x[i], r), w[i]);
    }
  };

  float amax = 0.0f;
  if constexpr (kVpt > 0) {
#pragma unroll
    for (int j = 0; j < kVpt; ++j) {
      const int vi = threadIdx.x + j * stride;
      if (vi < nvec) {
        normalize(vi, v[j]);
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (vi * 8 + i < a.k && isfinite(v[j][i])) amax = fmaxf(amax, fabsf(v[j][i]));
      }
    }
  } else {
    for_each_vec([&](int vi, float(&x)[8]) {
      normalize(vi, x);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (vi * 8 + i < a.k && isfinite(x[i])) amax = fmaxf(amax, fabsf(x[i]));
    });
  }
  amax = block_reduce(amax, MaxOp{}, smem_f);
  const float s = __fdiv_rn(amax, 127.0f);
  const float inv = __frcp_rn(s);

  int sum = 0;
  auto quantize = [&](int vi, const float(&y)[8]) {
    int c[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      c[i] = vi * 8 + i < a.k ? quant_sym(y[i], s, inv) : 0;
      sum += c[i];
    }
    store8(qr, vi * 8, a.k, c);
  };
  if constexpr (kVpt > 0) {
#pragma unroll
    for (int j = 0; j < kVpt; ++j) {
      const int vi = threadIdx.x + j * stride;
      if (vi < nvec) quantize(vi, v[j]);
    }
  } else {
    for_each_vec([&](int vi, float(&x)[8]) {
      normalize(vi, x);
      quantize(vi, x);
    });
  }
  sum = block_reduce(sum, SumOp{}, smem_i);
  if (threadIdx.x == 0) {
    a.scale[row] = s;
    if (a.row_sum) a.row_sum[row] = sum;
  }
}

// ---- streaming per-token kernel ---------------------------------------------------------------------------------

// The fast path of the per-token kernels (rows 16-byte aligned, k a multiple of 8, k <= kActQuantRegisterMaxK).
// A resident grid of CTAs walks the rows (row += gridDim.x); the next row's 16-byte vectors are loaded into
// registers before the current row is reduced, so every CTA keeps one row of loads in flight while it computes.
// Per element the work is: unpack, the float64 square sum (F2F + DFMA: x * x is exact in float64, so the fma
// equals add(mul) bit for bit), two fp32 multiplies, one integer max, and the quantizer below.
//
// The quantizer is the IEEE quotient without a per-element division: the division's own algorithm with its
// reciprocal hoisted out of the element loop. __fdiv_rn(y, s) is (SASS of this file) inv = rcp.approx(s) refined
// by one Newton step (fma(rcp, fma(rcp, -s, 1), rcp)), q = y * inv, r = fma(-q, s, y) (exact), q' = fma(r, inv, q),
// guarded by FCHK, which sends operands whose residual or quotient could leave the normal range to a slow routine.
// Here s is per row and lies in [2^-90, 2^100] on this path, and |y| <= 127 * s(1 + 2^-23); every quotient that can
// round to a non-zero code (>= 0.25) has y >= 2^-92, so the residual is exact and q' is the correctly rounded
// quotient, the same value __fdiv_rn returns; quotients below 0.25 give code 0 either way. rint(q') is the
// 1.5 * 2^23 magic add (round to nearest even, |q'| <= 127.00002), whose float bits hold 0x4B400000 + code: the
// code byte is the low byte, packed by PRMT and summed by DP4A. Rows with a non-finite y (the bits-max of |y|
// is >= Inf's), amax = 0, or s outside that range take the reference rules element by element (uniform over the
// CTA: no divergence).
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
constexpr float kFastScaleMin = 0x1p-90f, kFastScaleMax = 0x1p100f;

template <int kDType>
__device__ __forceinline__ void unpack_vec(const uint4& u, float (&v)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kDType == 0) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// The fp32 RMSNorm weight of vector vi from shared memory (the streaming kernel's layout, below).
__device__ __forceinline__ void smem_weight(const float4* w_smem, int vi, int nvec, float (&w)[8]) {
  const float4 w0 = w_smem[vi], w1 = w_smem[nvec + vi];
  w[0] = w0.x, w[1] = w0.y, w[2] = w0.z, w[3] = w0.w, w[4] = w1.x, w[5] = w1.y, w[6] = w1.z, w[7] = w1.w;
}

// y of vector vi of a row, recomputed from X (the rare rows' out-of-line code): x, or (x * r) * w with RMSNorm.
template <int kDType, bool kNorm>
__device__ __forceinline__ void row_y(const unsigned short* xr, int vi, int nvec, float r, const float4* w_smem,
                                      float (&y)[8]) {
  unpack_vec<kDType>(*reinterpret_cast<const uint4*>(xr + vi * 8), y);
  if constexpr (kNorm) {
    float w[8];
    smem_weight(w_smem, vi, nvec, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(__fmul_rn(y[i], r), w[i]);
  }
}

// The reference rules for a row the fast quantizer does not take (rare), out of line so that its division code does
// not raise the streaming kernel's register count: the thread's vectors are re-read (from L2) and y recomputed with
// the same operations. Returns this thread's code sum.
template <int kDType, bool kNorm, int kThreads, int kVpt>
__device__ __noinline__ int quant_row_reference(const unsigned short* xr, int k, float r, float s, const float4* w_smem,
                                                int8_t* qr) {
  const float inv = __frcp_rn(s);
  const int nvec = k / 8;
  int sum = 0;
  for (int j = 0; j < kVpt; ++j) {
    const int vi = threadIdx.x + j * kThreads;
    if (vi >= nvec) continue;
    float y[8];
    row_y<kDType, kNorm>(xr, vi, nvec, r, w_smem, y);
    int c[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      c[i] = quant_sym(y[i], s, inv);
      sum += c[i];
    }
    store8(qr, vi * 8, k, c);
  }
  return sum;
}

// This thread's bits-max of |y| over finite y only (the reference's amax), for a row holding a non-finite y (rare):
// out of line like quant_row_reference, re-reading the thread's vectors.
template <int kDType, bool kNorm, int kThreads, int kVpt>
__device__ __noinline__ uint32_t finite_amax_bits(const unsigned short* xr, int k, float r, const float4* w_smem) {
  const int nvec = k / 8;
  uint32_t fb = 0;
  for (int j = 0; j < kVpt; ++j) {
    const int vi = threadIdx.x + j * kThreads;
    if (vi >= nvec) continue;
    float y[8];
    row_y<kDType, kNorm>(xr, vi, nvec, r, w_smem, y);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (isfinite(y[i])) fb = max(fb, __float_as_uint(y[i]) & 0x7FFFFFFFu);
  }
  return fb;
}

// CTAs per SM the launch bounds ask for (register cap 65536 / (threads * blocks)): 128 x 8 holds 64 fp32 values and
// 32 registers of prefetched row per thread (164 registers, no spills); x 4 kernels use 93-96 (20 / 10 / 5 CTAs of
// 32 / 64 / 128 threads per SM); x 2 kernels use 59-64 (32 warps per SM; 128 x 2 bounded for 9 CTAs lost, session 29).
constexpr int stream_min_blocks(int threads, int vpt) {
  if (vpt == 2) return 1024 / threads;  // 64 / 128 / 256 threads: 16 / 8 / 4 CTAs (32 warps), 59-64 registers
  return threads == 32 ? 20 : threads == 64 ? 10 : threads == 128 ? (vpt > 4 ? 3 : 5) : threads == 256 ? 2 : 1;
}

template <int kDType, bool kNorm, int kThreads, int kVpt>
__global__ void __launch_bounds__(kThreads, stream_min_blocks(kThreads, kVpt))
    act_quant_stream_kernel(const RowArgs a) {
  constexpr int kWarps = kThreads / 32;
  // The rare rows' reference code (non-finite y, scales out of the fast range): in line at 4 vectors per thread
  // (measured faster), out of line at more, where in line it spilled the fast path's registers.
  constexpr bool kOutlineRare = kVpt > 4;
  __shared__ double red_ss[2][kWarps];
  __shared__ uint32_t red_max[2][kWarps];
  __shared__ uint32_t red_fmax[2][kWarps];
  __shared__ int red_sum[2][kWarps];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int nvec = a.k / 8;

  auto load_row = [&](int row, uint4(&u)[kVpt]) {
    const unsigned short* xr = static_cast<const unsigned short*>(a.x) + size_t(row) * a.ldx;
#pragma unroll
    for (int j = 0; j < kVpt; ++j) {
      const int vi = tid + j * kThreads;
      u[j] = vi < nvec ? __ldcs(reinterpret_cast<const uint4*>(xr + vi * 8)) : make_uint4(0, 0, 0, 0);
    }
  };
  // The first row's loads go out before the weight staging, so its DRAM latency overlaps the weight's. Launched
  // as a programmatic dependent, the CTA stages the weight while the previous kernel finishes instead, and reads X
  // (and writes anything) only after griddepcontrol.wait; it lets its own dependents launch at once (they wait for
  // this grid's completion before they read its outputs).
  uint4 nxt[kVpt];
  int row = blockIdx.x;
  if (a.pdl) {
    ptx::griddep_launch_dependents();
  } else if (row < a.m) {
    load_row(row, nxt);
  }

  // The RMSNorm weight as fp32 in shared memory (dynamic, k * 4 bytes: elements 0..3 of vector vi at [vi], 4..7 at
  // [nvec + vi], so a warp's 16-byte reads are conflict-free), converted once per CTA. Each thread reads back only
  // the vectors it wrote (no barrier for the data). w_finite: every weight is finite (one CTA-wide vote).
  extern __shared__ float4 w_smem[];
  bool w_finite = true;
  if constexpr (kNorm) {
#pragma unroll
    for (int j = 0; j < kVpt; ++j) {
      const int vi = tid + j * kThreads;
      if (vi < nvec) {
        float w[8];
        unpack_vec<kDType>(*reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(a.weight) + vi * 8), w);
        w_smem[vi] = make_float4(w[0], w[1], w[2], w[3]);
        w_smem[nvec + vi] = make_float4(w[4], w[5], w[6], w[7]);
#pragma unroll
        for (int i = 0; i < 8; ++i) w_finite = w_finite && isfinite(w[i]);
      }
    }
    w_finite = __syncthreads_and(w_finite) != 0;
  }
  if (a.pdl) {
    ptx::griddep_wait();
    if (row < a.m) load_row(row, nxt);
  }
  // Thread 0 writes the code sum of the previous row once every warp has stored its part (after a barrier).
  auto finish_row_sum = [&](int prev_row, int parity) {
    if (tid == 0 && prev_row >= 0 && a.row_sum) {
      int t = 0;
#pragma unroll
      for (int i = 0; i < kWarps; ++i) t += red_sum[parity][i];
      a.row_sum[prev_row] = t;
    }
  };

  int prev_row = -1, p = 0;
  for (; row < a.m; row += gridDim.x, p ^= 1) {
    float v[kVpt][8];
#pragma unroll
    for (int j = 0; j < kVpt; ++j) unpack_vec<kDType>(nxt[j], v[j]);
    if (row + int(gridDim.x) < a.m) load_row(row + gridDim.x, nxt);

    bool finite_y = false;  // kNorm: y cannot be NaN (finite x, r and weights), so a float max of |y| suffices
    float r_row = 1.0f;     // kNorm: the row's 1 / rms
    if constexpr (kNorm) {
      // Each vector's fp32 chain (kVpt independent ones), then two float64 chains over the vectors.
      double sa[2] = {0.0, 0.0};
#pragma unroll
      for (int j = 0; j < kVpt; ++j) sa[j & 1] = __dadd_rn(sa[j & 1], chunk_ss<true>(v[j]));
      double ss = __dadd_rn(sa[0], sa[1]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
      if (lane == 0) red_ss[p][warp] = ss;
      __syncthreads();
      finish_row_sum(prev_row, p ^ 1);
      ss = red_ss[p][0];
#pragma unroll
      for (int i = 1; i < kWarps; ++i) ss = __dadd_rn(ss, red_ss[p][i]);
      // ss / k correctly rounded without the division routine: inv_k = RN(1 / k) (host), q = RN(ss * inv_k) is within
      // one ulp, the residual fma(-q, k, ss) is exact, and RN(q + r * inv_k) is RN(ss / k) (Markstein's theorem; ss
      // and ss / k are normal or zero here). Non-finite ss keeps q (Inf / NaN, as the division gives).
      const double q = __dmul_rn(ss, a.inv_k);
      const double msd = isfinite(q) ? __fma_rn(__fma_rn(-q, double(a.k), ss), a.inv_k, q) : q;
      const float ms = __double2float_rn(msd);
      const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, a.eps)));
      finite_y = w_finite && isfinite(ss) && isfinite(r);
      r_row = r;
#pragma unroll
      for (int j = 0; j < kVpt; ++j) {
        const int vi = min(tid + j * kThreads, nvec - 1);  // unused vectors hold zeros: any weight keeps them 0
        float w[8];
        smem_weight(w_smem, vi, nvec, w);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[j][i] = __fmul_rn(__fmul_rn(v[j][i], r), w[i]);
      }
    }
    // Bits-max of |y|: for non-negative floats the bit order is the value order, and NaN / Inf sort above every
    // finite value, so one integer max also tells whether the row is finite. Unused vectors hold zeros.
    // With finite x, r and weights, y is finite or +-Inf (overflow): a float max of |y| (one FMNMX per element)
    // gives the same bits.
    uint32_t mb = 0;
    if (finite_y) {
      float m = 0.0f;
#pragma unroll
      for (int j = 0; j < kVpt; ++j)
#pragma unroll
        for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(v[j][i]));
      mb = __float_as_uint(m);
    } else {
#pragma unroll
      for (int j = 0; j < kVpt; ++j)
#pragma unroll
        for (int i = 0; i < 8; ++i) mb = max(mb, __float_as_uint(v[j][i]) & 0x7FFFFFFFu);
    }
    mb = __reduce_max_sync(0xffffffffu, mb);
    if (lane == 0) red_max[p][warp] = mb;
    __syncthreads();
    if constexpr (!kNorm) finish_row_sum(prev_row, p ^ 1);
    mb = red_max[p][0];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) mb = max(mb, red_max[p][i]);

    float amax = __uint_as_float(mb);
    const bool all_finite = mb < 0x7F800000u;
    if (!all_finite) {  // the reference's amax over finite values only (uniform branch)
      uint32_t fb = 0;
      if constexpr (kOutlineRare) {
        fb = finite_amax_bits<kDType, kNorm, kThreads, kVpt>(
            static_cast<const unsigned short*>(a.x) + size_t(row) * a.ldx, a.k, r_row, w_smem);
      } else {
#pragma unroll
        for (int j = 0; j < kVpt; ++j)
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (isfinite(v[j][i])) fb = max(fb, __float_as_uint(v[j][i]) & 0x7FFFFFFFu);
      }
      fb = __reduce_max_sync(0xffffffffu, fb);
      if (lane == 0) red_fmax[p][warp] = fb;
      __syncthreads();
      fb = red_fmax[p][0];
#pragma unroll
      for (int i = 1; i < kWarps; ++i) fb = max(fb, red_fmax[p][i]);
      amax = __uint_as_float(fb);
    }
    const float s = __fdiv_rn(amax, 127.0f);
    const bool fast = all_finite && s >= kFastScaleMin && s <= kFastScaleMax;

    int sum = 0;
    int8_t* qr = a.q + size_t(row) * a.ldq;
    if (fast) {
      const float rc = rcp_approx(s);
      const float inv = __fmaf_rn(rc, __fmaf_rn(rc, -s, 1.0f), rc);  // the division's refined reciprocal
#pragma unroll
      for (int j = 0; j < kVpt; ++j) {
        const int vi = tid + j * kThreads;  // vectors past the row hold zeros (code 0): only their store is skipped
        uint32_t u[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float q = __fmul_rn(v[j][i], inv);
          const float qd = __fmaf_rn(__fmaf_rn(-q, s, v[j][i]), inv, q);  // == __fdiv_rn(y, s) here
          u[i] = __float_as_uint(__fadd_rn(qd, kMagic));
        }
        uint2 o;
        o.x = __byte_perm(__byte_perm(u[0], u[1], 0x0040), __byte_perm(u[2], u[3], 0x0040), 0x5410);
        o.y = __byte_perm(__byte_perm(u[4], u[5], 0x0040), __byte_perm(u[6], u[7], 0x0040), 0x5410);
        sum = __dp4a(int(o.x), 0x01010101, sum);
        sum = __dp4a(int(o.y), 0x01010101, sum);
        if (vi < nvec) *reinterpret_cast<uint2*>(qr + vi * 8) = o;
      }
    } else if constexpr (kOutlineRare) {
      sum = quant_row_reference<kDType, kNorm, kThreads, kVpt>(
          static_cast<const unsigned short*>(a.x) + size_t(row) * a.ldx, a.k, r_row, s, w_smem, qr);
    } else {
      const float inv = __frcp_rn(s);
#pragma unroll
      for (int j = 0; j < kVpt; ++j) {
        const int vi = tid + j * kThreads;
        if (vi >= nvec) continue;
        int c[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          c[i] = quant_sym(v[j][i], s, inv);
          sum += c[i];
        }
        store8(qr, vi * 8, a.k, c);
      }
    }
    sum = __reduce_add_sync(0xffffffffu, sum);
    if (lane == 0) red_sum[p][warp] = sum;
    if (tid == 0) a.scale[row] = s;
    prev_row = row;
  }
  __syncthreads();
  finish_row_sum(prev_row, p ^ 1);
}

// ---- per-block quantizer ----------------------------------------------------------------------------------------

struct BlockArgs {
  int rows, k, block;
  const void* x;
  long long ldx;
  int8_t* q;
  long long ldq;
  float* scale;
  float* offset;
  int32_t* block_sum;
  int vec;
};

constexpr int kBlockThreads = 256;
constexpr int kNoIndex = INT_MAX;

// (value, index) order of the CPU loop: a later equal value never replaces an earlier one.
__device__ __forceinline__ void take_min(float& v, int& i, float ov, int oi) {
  if (oi == kNoIndex) return;
  if (i == kNoIndex || ov < v || (ov == v && oi < i)) v = ov, i = oi;
}
__device__ __forceinline__ void take_max(float& v, int& i, float ov, int oi) {
  if (oi == kNoIndex) return;
  if (i == kNoIndex || ov > v || (ov == v && oi < i)) v = ov, i = oi;
}

// grid (rows, ceil(k / (8 * kBlockThreads))): each thread 8 consecutive elements, L / 8 lanes per K-block.
// kDType: 0 bf16, 1 fp16, 2 fp32. kLanes: lanes per block (block / 8: 4, 8, 16).
template <int kDType, int kLanes>
__global__ void __launch_bounds__(kBlockThreads) block_quant_kernel(const BlockArgs a) {
  const int row = blockIdx.x;
  const int e = (blockIdx.y * kBlockThreads + threadIdx.x) * 8;
  const size_t esize = kDType == 2 ? 4 : 2;
  const void* xr = static_cast<const char*>(a.x) + size_t(row) * a.ldx * esize;
  float v[8];
  load8<kDType>(xr, e, a.k, a.vec != 0, v);
  float lo = 0.0f, hi = 0.0f;
  int lo_i = kNoIndex, hi_i = kNoIndex;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (e + i >= a.k || !isfinite(v[i])) continue;
    take_min(lo, lo_i, v[i], e + i);
    take_max(hi, hi_i, v[i], e + i);
  }
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) {
    const float olo = __shfl_xor_sync(0xffffffffu, lo, off), ohi = __shfl_xor_sync(0xffffffffu, hi, off);
    const int olo_i = __shfl_xor_sync(0xffffffffu, lo_i, off), ohi_i = __shfl_xor_sync(0xffffffffu, hi_i, off);
    take_min(lo, lo_i, olo, olo_i);
    take_max(hi, hi_i, ohi, ohi_i);
  }
  if (lo_i == kNoIndex) lo = 0.0f, hi = 0.0f;  // no finite value in the block
  const float s = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
  const bool degenerate = s == 0.0f || !isfinite(s);
  const float o = degenerate ? lo : __fadd_rn(lo, __fmul_rn(128.0f, s));
  const float inv = __frcp_rn(s);
  int c[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = 0;
    if (!degenerate && !isnan(v[i]))
      c[i] = static_cast<int>(fminf(fmaxf(rint_div(__fsub_rn(v[i], o), s, inv), -128.0f), 127.0f));
    if (e + i < a.k) sum += c[i];
  }
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (e >= a.k) return;
  store8(a.q + size_t(row) * a.ldq, e, a.k, c);
  if ((threadIdx.x % kLanes) == 0) {
    const int nb = a.k / a.block;
    const size_t mi = size_t(row) * nb + e / a.block;
    a.scale[mi] = degenerate ? 0.0f : s;
    a.offset[mi] = o;
    a.block_sum[mi] = sum;
  }
}

// ---- validation -------------------------------------------------------------------------------------------------

Status invalid(const std::string& msg) {
  return Status(StatusCode::kInvalidArgument, msg);
}

bool aligned(const void* p, size_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

size_t dtype_bytes(GemmDType d) {
  return d == GemmDType::kFP32 ? 4 : 2;
}

// Shared checks of the input and the codes; *ldx_out / *ldq_out receive the resolved leading dimensions.
Status check_common(const char* what, int rows, int k, GemmDType xd, const void* x, long long ldx, const int8_t* q,
                    long long ldq, long long* ldx_out, long long* ldq_out) {
  if (rows < 1 || rows > (1 << 30))
    return invalid(std::string(what) + ": M " + std::to_string(rows) + " is outside 1..2^30");
  if (k < 1 || k > kActQuantMaxK)
    return invalid(std::string(what) + ": K " + std::to_string(k) + " is outside 1.." + std::to_string(kActQuantMaxK));
  if (!x) return invalid(std::string(what) + ": x is null");
  if (!aligned(x, dtype_bytes(xd)))
    return invalid(std::string(what) + ": x is not aligned to its element size " + std::to_string(dtype_bytes(xd)));
  const long long lx = ldx ? ldx : k;
  if (lx < k) return invalid(std::string(what) + ": ldx " + std::to_string(ldx) + " < K " + std::to_string(k));
  if (!q) return invalid(std::string(what) + ": q is null");
  if (!aligned(q, 16)) return invalid(std::string(what) + ": q is not 16-byte aligned");
  const long long lq = ldq ? ldq : k;
  if (lq < k || lq % 16 != 0)
    return invalid(std::string(what) + ": ldq " + std::to_string(lq) + " must be >= K " + std::to_string(k) +
                   " and a multiple of 16");
  *ldx_out = lx;
  *ldq_out = lq;
  return Status::Ok();
}

Status check_vec_out(const char* what, const char* name, const void* p, bool required) {
  if (!p) return required ? invalid(std::string(what) + ": " + name + " is null") : Status::Ok();
  if (!aligned(p, 4)) return invalid(std::string(what) + ": " + name + " is not 4-byte aligned");
  return Status::Ok();
}

// Rows from which RMSNorm + quantize with K in (4096, 8192] takes the (128, 8) streaming kernel (see launch_rows).
constexpr int kStreamWideMinRows = 2048;

// RMSNorm + quantize with K <= 4096 runs CTAs of 2 vectors per thread where the device's DRAM bandwidth per SM is below
// this (GB/s; the H100 SXM has 25.4, the H200 36.4), of 4 above it. See launch_rows.
constexpr double kRmsNarrowMaxGbpsPerSm = 30.0;

// Threads per row: enough that kVpt = 4 vectors of 8 cover the row (K <= 16384 with 512 threads).
int row_threads(int k) {
  return k <= 4096 ? 128 : k <= 8192 ? 256 : 512;
}

// Resident CTAs per SM of a streaming kernel on `dev`, the current device (cached per device).
// The dynamic shared memory (the RMSNorm weight, 4 bytes per element) is opted in once per kernel and device; the
// occupancy is computed for the largest K the kernel serves (threads * kVpt vectors * 8 elements: smem_cap bytes), so
// one cached value serves every K of that kernel.
template <auto kKernel>
Status stream_grid(const DeviceInfo& dev, int smem_cap, int threads, int smem, int m, unsigned* grid) {
  static std::array<std::atomic<int>, 64> cache{};  // one per kernel (template argument) and device
  int per_sm = dev.device < 64 ? cache[dev.device].load(std::memory_order_relaxed) : 0;
  if (per_sm <= 0) {
    const int smem_max = smem > 0 ? smem_cap : 0;
    if (smem_max > 48 * 1024)
      QDEC_CUDA_RETURN(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
    QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, smem_max));
    if (per_sm <= 0) return Status(StatusCode::kCudaError, "act_quant: the streaming kernel cannot be resident");
    if (dev.device < 64) cache[dev.device].store(per_sm, std::memory_order_relaxed);
  }
  *grid = static_cast<unsigned>(std::min<long long>(m, static_cast<long long>(per_sm) * dev.sm_count));
  return Status::Ok();
}

template <int kDType, bool kNorm, int kThreads, int kVpt>
Status launch_stream(const RowArgs& a, const DeviceInfo& dev, cudaStream_t stream) {
  constexpr auto kernel = &act_quant_stream_kernel<kDType, kNorm, kThreads, kVpt>;
  const int smem = kNorm ? a.k * 4 : 0;  // the fp32 weight
  unsigned grid = 0;
  QDEC_RETURN_IF_ERROR(stream_grid<kernel>(dev, kThreads * kVpt * 8 * 4, kThreads, smem, a.m, &grid));
  const LaunchConfig cfg(dim3(grid), dim3(kThreads), smem, stream, a.pdl);
  QDEC_CUDA_RETURN(cudaLaunchKernelEx(cfg.get(), kernel, a));
  return cuda_status(cudaGetLastError(), kNorm ? "rmsnorm_quantize launch" : "quantize_activations launch");
}

// rms_vectors: RMSNorm's vectors per thread at K <= 4096 forced to 2 or 4 (0: by the device, below).
template <bool kNorm>
Status launch_rows(const RowArgs& a, GemmDType xd, cudaStream_t stream, int rms_vectors = 0) {
  const bool regs = a.k <= kActQuantRegisterMaxK;
  // Aligned rows of whole vectors stream through a resident grid; the rest (odd K, unaligned X, K above the
  // register limit) run one CTA per row with element loads where needed. Both are bit-exact with the CPU.
  if (regs && a.vec && a.k % 8 == 0) {
    // Dispatch list: dtype {bf16, fp16} x (CTA size, vectors per thread) {(64, 2), (128, 2), (256, 2), (256, 4), (256,
    // 7), (512, 4)} for K <= 1024, 2048, 4096, 8192, 14336, 16384; RMSNorm's own: (32, 4), (64, 4), (128, 4) for K <=
    // 4096 on devices of high DRAM bandwidth per SM, (128, 8) for K in (4096, 8192] from kStreamWideMinRows rows
    // (below). The CTA size follows K so that every thread holds whole vectors and the SM holds 4-20 rows' CTAs: with
    // 128 threads for every K <= 4096, K = 2048 left half the threads idle and an SM only 5 rows (measured, H200:
    // RMSNorm + quantize at 16384 x 2048 48.8% -> 88.9% of the copy ceiling, x 1024 24.7% -> 80.6%, the quantizer alone
    // 68.5% -> 94.2% at x 2048; docs/int8_gemm.md). For K <= 4096, 2 vectors per thread (32 warps per SM, 4-16 rows)
    // instead of 4 (20 warps, 5-20 rows) took the quantizer alone 0-14% less time on both cards (session 29), and
    // RMSNorm + quantize 1-16% less on the H100 (4096 x 2048 77.6-79.1% -> 79.7-80.7% of the copy ceiling; 4096 x 4096
    // within a point); on the H200 RMSNorm's row, a latency chain through two block barriers, lost with twice the warps
    // per row at M >= 4096 (4096 x 2048 70.0% -> 64.0%, 4096 x 4096 80.6% -> 70.4%, 16384 x 4096 -11%), so RMSNorm
    // takes 2 vectors per thread only where DRAM bandwidth per SM is below kRmsNarrowMaxGbpsPerSm.
    // K in (8192, 14336] (Llama's 14336 among them) runs two CTAs of 256 threads per SM with 7 vectors each instead
    // of one of 512: a row's barriers then stall half the SM, not all of it.
    // RMSNorm with K in (4096, 8192] and M >= kStreamWideMinRows runs (128, 8): 64 elements per thread halve the
    // per-row work (reductions, barriers, the scalar ms / r / s math) per element, measured +5 points of the copy
    // ceiling at M = 4096, K = 8192; below that M it loses (M = 1: one 4-warp CTA, twice the serial work per thread;
    // M = 1024: -4%), and the plain quantizer, with less work per element, loses 1-2 points with it at every M.
    const bool wide = kNorm && a.k > 4096 && a.k <= 8192 && a.m >= kStreamWideMinRows;
    DeviceInfo dev;  // the grid's size, and RMSNorm's CTA shape at K <= 4096
    QDEC_RETURN_IF_ERROR(current_device_info(&dev));
    bool narrow = true;  // K <= 4096: 2 vectors per thread
    if constexpr (kNorm) {
      narrow = rms_vectors != 0
                   ? rms_vectors == 2
                   : dev.dram_gbps > 0.0 && dev.sm_count > 0 && dev.dram_gbps / dev.sm_count < kRmsNarrowMaxGbpsPerSm;
    }
    auto go = [&](auto dtype_tag) -> Status {
      constexpr int D = decltype(dtype_tag)::value;
      if (a.k <= 4096) {
        if constexpr (kNorm) {
          if (!narrow) {
            return a.k <= 1024   ? launch_stream<D, kNorm, 32, 4>(a, dev, stream)
                   : a.k <= 2048 ? launch_stream<D, kNorm, 64, 4>(a, dev, stream)
                                 : launch_stream<D, kNorm, 128, 4>(a, dev, stream);
          }
        }
        return a.k <= 1024   ? launch_stream<D, kNorm, 64, 2>(a, dev, stream)
               : a.k <= 2048 ? launch_stream<D, kNorm, 128, 2>(a, dev, stream)
                             : launch_stream<D, kNorm, 256, 2>(a, dev, stream);
      }
      if (wide) return launch_stream<D, kNorm, 128, 8>(a, dev, stream);
      if (a.k <= 8192) return launch_stream<D, kNorm, 256, 4>(a, dev, stream);
      if (a.k <= 14336) return launch_stream<D, kNorm, 256, 7>(a, dev, stream);
      return launch_stream<D, kNorm, 512, 4>(a, dev, stream);
    };
    return xd == GemmDType::kBF16 ? go(std::integral_constant<int, 0>{}) : go(std::integral_constant<int, 1>{});
  }
  const int threads = row_threads(a.k);
  const dim3 grid(static_cast<unsigned>(a.m));
  if (xd == GemmDType::kBF16) {
    if (regs) {
      act_quant_row_kernel<0, kNorm, 4><<<grid, threads, 0, stream>>>(a);
    } else {
      act_quant_row_kernel<0, kNorm, 0><<<grid, threads, 0, stream>>>(a);
    }
  } else {
    if (regs) {
      act_quant_row_kernel<1, kNorm, 4><<<grid, threads, 0, stream>>>(a);
    } else {
      act_quant_row_kernel<1, kNorm, 0><<<grid, threads, 0, stream>>>(a);
    }
  }
  return cuda_status(cudaGetLastError(), kNorm ? "rmsnorm_quantize launch" : "quantize_activations launch");
}

}  // namespace

Status quantize_activations(const ActQuantParams& p, cudaStream_t stream) {
  const char* what = "quantize_activations";
  if (p.x_dtype != GemmDType::kBF16 && p.x_dtype != GemmDType::kFP16)
    return invalid(std::string(what) + ": x dtype " + gemm_dtype_name(p.x_dtype) + " is not supported (bf16, fp16)");
  long long ldx = 0, ldq = 0;
  QDEC_RETURN_IF_ERROR(check_common(what, p.m, p.k, p.x_dtype, p.x, p.ldx, p.q, p.ldq, &ldx, &ldq));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "scale", p.scale, true));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "row_sum", p.row_sum, false));
  RowArgs a{p.m, p.k, p.x, ldx, p.q, ldq, p.scale, p.row_sum, nullptr, 0.0f, 0, 1.0 / p.k};
  a.vec = aligned(p.x, 16) && ldx % 8 == 0;
  a.pdl = p.pdl ? 1 : 0;
  return launch_rows<false>(a, p.x_dtype, stream);
}

Status rmsnorm_quantize(const RmsNormQuantParams& p, cudaStream_t stream) {
  return act_quant_internal::rmsnorm_quantize_vectors(p, 0, stream);
}

Status act_quant_internal::rmsnorm_quantize_vectors(const RmsNormQuantParams& p, int vectors, cudaStream_t stream) {
  const char* what = "rmsnorm_quantize";
  if (vectors != 0 && vectors != 2 && vectors != 4)
    return invalid(std::string(what) + ": vectors per thread " + std::to_string(vectors) + " must be 0, 2 or 4");
  const ActQuantParams& o = p.out;
  if (o.x_dtype != GemmDType::kBF16 && o.x_dtype != GemmDType::kFP16)
    return invalid(std::string(what) + ": x dtype " + gemm_dtype_name(o.x_dtype) + " is not supported (bf16, fp16)");
  long long ldx = 0, ldq = 0;
  QDEC_RETURN_IF_ERROR(check_common(what, o.m, o.k, o.x_dtype, o.x, o.ldx, o.q, o.ldq, &ldx, &ldq));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "scale", o.scale, true));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "row_sum", o.row_sum, false));
  if (!p.weight) return invalid(std::string(what) + ": weight is null");
  if (!aligned(p.weight, 2)) return invalid(std::string(what) + ": weight is not 2-byte aligned");
  if (!std::isfinite(p.eps) || p.eps < 0.0f)
    return invalid(std::string(what) + ": eps " + std::to_string(p.eps) + " must be finite and >= 0");
  RowArgs a{o.m, o.k, o.x, ldx, o.q, ldq, o.scale, o.row_sum, p.weight, p.eps, 0, 1.0 / o.k};
  a.vec = aligned(o.x, 16) && ldx % 8 == 0 && aligned(p.weight, 16);
  a.pdl = o.pdl ? 1 : 0;
  return launch_rows<true>(a, o.x_dtype, stream, vectors);
}

Status quantize_blocks(const BlockQuantParams& p, cudaStream_t stream) {
  const char* what = "quantize_blocks";
  if (p.x_dtype != GemmDType::kBF16 && p.x_dtype != GemmDType::kFP16 && p.x_dtype != GemmDType::kFP32)
    return invalid(std::string(what) + ": x dtype " + gemm_dtype_name(p.x_dtype) + " is not supported");
  long long ldx = 0, ldq = 0;
  QDEC_RETURN_IF_ERROR(check_common(what, p.rows, p.k, p.x_dtype, p.x, p.ldx, p.q, p.ldq, &ldx, &ldq));
  if (p.block != 32 && p.block != 64 && p.block != 128)
    return invalid(std::string(what) + ": block " + std::to_string(p.block) + " is not supported (32, 64, 128)");
  if (p.k % p.block != 0)
    return invalid(std::string(what) + ": K " + std::to_string(p.k) + " is not a multiple of the block " +
                   std::to_string(p.block));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "scale", p.scale, true));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "offset", p.offset, true));
  QDEC_RETURN_IF_ERROR(check_vec_out(what, "block_sum", p.block_sum, true));
  BlockArgs a{p.rows, p.k, p.block, p.x, ldx, p.q, ldq, p.scale, p.offset, p.block_sum, 0};
  a.vec = aligned(p.x, 16) && (ldx * static_cast<long long>(dtype_bytes(p.x_dtype))) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(p.rows),
                  static_cast<unsigned>((p.k + 8 * kBlockThreads - 1) / (8 * kBlockThreads)));
  // Dispatch list: dtype {bf16, fp16, fp32} x lanes per block {4, 8, 16}.
  auto go = [&](auto dtype_tag) {
    constexpr int D = decltype(dtype_tag)::value;
    if (p.block == 32) {
      block_quant_kernel<D, 4><<<grid, kBlockThreads, 0, stream>>>(a);
    } else if (p.block == 64) {
      block_quant_kernel<D, 8><<<grid, kBlockThreads, 0, stream>>>(a);
    } else {
      block_quant_kernel<D, 16><<<grid, kBlockThreads, 0, stream>>>(a);
    }
  };
  if (p.x_dtype == GemmDType::kBF16) {
    go(std::integral_constant<int, 0>{});
  } else if (p.x_dtype == GemmDType::kFP16) {
    go(std::integral_constant<int, 1>{});
  } else {
    go(std::integral_constant<int, 2>{});
  }
  return cuda_status(cudaGetLastError(), "quantize_blocks launch");
}

}  // namespace qdec
