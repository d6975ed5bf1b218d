// Convolution with int4/int8 weights (seed 003's problem) as an explicit im2col GEMM, first version:
//   1. im2col: input NCHW (fp32 or fp16) -> Xc [batch * out_h * out_w, kh * kw * ci] fp16 in the workspace
//      (column index (ky * kw + kx) * ci + c matches the [Co, Kh, Kw, Ci] weight order, so a quantization
//      group along Ci is a contiguous run of the GEMM's K),
//   2. qdec::gemm with Y fp32 [M, Co] (bias and ReLU/ReLU6 fused in its epilogue),
//   3. NHWC -> NCHW transpose into the output dtype.
// fp32 inputs are rounded to fp16 for the tensor cores (|x| must stay below 65504). docs/gemm.md.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "qdec/gemm.h"
#include "runtime/cuda_check.h"

namespace qdec {
namespace {

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

size_t round256(size_t b) {
  return (b + 255) / 256 * 256;
}

struct ConvGeom {
  int oh, ow, ci, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
};

template <bool kInF32>
__global__ void im2col_kernel(const void* __restrict__ in, __half* __restrict__ out, long long m_total, int k_total,
                              ConvGeom gm) {
  const long long total = m_total * k_total;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long m = i / k_total;
    const int kk = static_cast<int>(i % k_total);
    const int c = kk % gm.ci, tap = kk / gm.ci, kx = tap % gm.kw, ky = tap / gm.kw;
    const int ox = static_cast<int>(m % gm.ow);
    const long long r = m / gm.ow;
    const int oy = static_cast<int>(r % gm.oh);
    const long long b = r / gm.oh;
    const int iy = oy * gm.sh - gm.ph + ky * gm.dh, ix = ox * gm.sw - gm.pw + kx * gm.dw;
    __half v = __float2half_rn(0.f);
    if (iy >= 0 && iy < gm.h && ix >= 0 && ix < gm.w) {
      const long long src = ((b * gm.ci + c) * gm.h + iy) * static_cast<long long>(gm.w) + ix;
      if constexpr (kInF32) {
        v = __float2half_rn(static_cast<const float*>(in)[src]);
      } else {
        v = static_cast<const __half*>(in)[src];
      }
    }
    out[i] = v;
  }
}

// y [batch * P, co] fp32 -> out [batch, co, P] (P = out_h * out_w), through a 32 x 32 shared tile.
template <bool kOutF32>
__global__ void nhwc_to_nchw_kernel(const float* __restrict__ y, void* __restrict__ out, int batch, int p_total,
                                    int co) {
  __shared__ float tile[32][33];
  const int b = blockIdx.z;
  const int p0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int p = p0 + r, c = c0 + threadIdx.x;
    if (p < p_total && c < co) tile[r][threadIdx.x] = y[(static_cast<long long>(b) * p_total + p) * co + c];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int c = c0 + r, p = p0 + threadIdx.x;
    if (p < p_total && c < co) {
      const long long dst = (static_cast<long long>(b) * co + c) * p_total + p;
      if constexpr (kOutF32) {
        static_cast<float*>(out)[dst] = tile[threadIdx.x][r];
      } else {
        static_cast<__half*>(out)[dst] = __float2half_rn(tile[threadIdx.x][r]);
      }
    }
  }
}

struct ConvPlan {
  long long m = 0;
  int k = 0;
  size_t xc_bytes = 0, yc_bytes = 0, gemm_bytes = 0;
  GemmParams gp;
  // im2col and the NHWC output start past the GEMM's workspace and the state zone (both at the base).
  size_t scratch_offset() const { return std::max(gemm_bytes, kWorkspaceStateBytes); }
};

Status validate_conv(const Conv2dParams& p, ConvPlan* plan) {
  struct Named {
    const char* name;
    int v;
    int min;
  };
  for (const Named& n :
       {Named{"batch", p.batch, 1}, Named{"in_channels", p.in_channels, 1}, Named{"in_h", p.in_h, 1},
        Named{"in_w", p.in_w, 1}, Named{"out_channels", p.out_channels, 1}, Named{"kernel_h", p.kernel_h, 1},
        Named{"kernel_w", p.kernel_w, 1}, Named{"stride_h", p.stride_h, 1}, Named{"stride_w", p.stride_w, 1},
        Named{"dilation_h", p.dilation_h, 1}, Named{"dilation_w", p.dilation_w, 1}, Named{"pad_h", p.pad_h, 0},
        Named{"pad_w", p.pad_w, 0}}) {
    if (n.v < n.min)
      return invalid(std::string(n.name) + " " + std::to_string(n.v) + " must be >= " + std::to_string(n.min));
  }
  if (p.dtype != GemmDType::kFP32 && p.dtype != GemmDType::kFP16)
    return invalid(std::string("conv dtype ") + gemm_dtype_name(p.dtype) + " is not supported (fp32, fp16)");
  if (p.out_h() < 1 || p.out_w() < 1)
    return invalid("output size " + std::to_string(p.out_h()) + " x " + std::to_string(p.out_w()) +
                   " is empty (kernel, dilation and padding do not fit the input)");
  const long long k = 1LL * p.kernel_h * p.kernel_w * p.in_channels;
  if (k > (1 << 24)) return invalid("kernel_h * kernel_w * in_channels " + std::to_string(k) + " is too large");
  if (p.w.layout.n != p.out_channels)
    return invalid("weight N " + std::to_string(p.w.layout.n) + " does not match out_channels " +
                   std::to_string(p.out_channels));
  if (p.w.layout.k != k)
    return invalid("weight K " + std::to_string(p.w.layout.k) +
                   " does not match kernel_h * kernel_w * in_channels = " + std::to_string(k));
  const int gs = p.w.layout.format.group_size;
  if (gs != 0 && p.in_channels % gs != 0)
    return invalid("in_channels " + std::to_string(p.in_channels) + " is not a multiple of the weight group size " +
                   std::to_string(gs) + " (groups run along Ci; use a smaller group or per-channel scales)");
  if (!p.input) return invalid("input is null");
  if (!p.output) return invalid("output is null");
  plan->m = 1LL * p.batch * p.out_h() * p.out_w();
  if (plan->m > (1LL << 31) - 1) return invalid("batch * out_h * out_w " + std::to_string(plan->m) + " is too large");
  if (p.batch > 65535) return invalid("batch " + std::to_string(p.batch) + " exceeds 65535");
  plan->k = static_cast<int>(k);
  plan->xc_bytes = round256(size_t(plan->m) * plan->k * 2);
  plan->yc_bytes = round256(size_t(plan->m) * p.out_channels * 4);
  GemmParams& g = plan->gp;
  g.m = static_cast<int>(plan->m);
  g.x_dtype = GemmDType::kFP16;
  g.y_dtype = GemmDType::kFP32;
  g.w = p.w;
  g.bias = p.bias;
  g.act = p.act;
  g.path = p.path;
  // Placeholder pointers (aligned) for planning; the real ones are set at launch.
  g.x = reinterpret_cast<const void*>(uintptr_t(256));
  g.y = reinterpret_cast<void*>(uintptr_t(256));
  QDEC_RETURN_IF_ERROR(gemm_workspace_bytes(g, &plan->gemm_bytes));
  return Status::Ok();
}

}  // namespace

Status conv2d_workspace_bytes(const Conv2dParams& p, size_t* bytes) {
  ConvPlan plan;
  QDEC_RETURN_IF_ERROR(validate_conv(p, &plan));
  *bytes = plan.scratch_offset() + plan.xc_bytes + plan.yc_bytes;
  return Status::Ok();
}

Status conv2d_gemm_path(const Conv2dParams& p, GemmPath* path) {
  if (!path) return invalid("path is null");
  ConvPlan plan;
  QDEC_RETURN_IF_ERROR(validate_conv(p, &plan));
  return gemm_plan(plan.gp, path, nullptr);
}

Status conv2d(const Conv2dParams& p, cudaStream_t stream) {
  ConvPlan plan;
  QDEC_RETURN_IF_ERROR(validate_conv(p, &plan));
  const size_t need = plan.scratch_offset() + plan.xc_bytes + plan.yc_bytes;
  if (!p.workspace || p.workspace_bytes < need)
    return Status(StatusCode::kOutOfMemory, "workspace_bytes " + std::to_string(p.workspace_bytes) +
                                                " is smaller than the " + std::to_string(need) +
                                                " bytes the convolution needs (or workspace is null)");
  if (reinterpret_cast<uintptr_t>(p.workspace) % 256 != 0) return invalid("workspace is not 256-byte aligned");
  // Layout (qdec/workspace.h): the GEMM's own workspace at the base, so that its split-K state sits in the state
  // zone of a buffer shared with other calls; im2col and the NHWC output after the zone and the GEMM's scratch.
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  __half* xc = reinterpret_cast<__half*>(ws + plan.scratch_offset());
  float* yc = reinterpret_cast<float*>(ws + plan.scratch_offset() + plan.xc_bytes);
  const ConvGeom gm{p.out_h(),  p.out_w(),  p.in_channels, p.in_h,  p.in_w,       p.kernel_h,  p.kernel_w,
                    p.stride_h, p.stride_w, p.pad_h,       p.pad_w, p.dilation_h, p.dilation_w};
  const long long total = plan.m * plan.k;
  const unsigned blocks = static_cast<unsigned>(std::min<long long>((total + 255) / 256, 132LL * 32));
  if (p.dtype == GemmDType::kFP32) {
    im2col_kernel<true><<<blocks, 256, 0, stream>>>(p.input, xc, plan.m, plan.k, gm);
  } else {
    im2col_kernel<false><<<blocks, 256, 0, stream>>>(p.input, xc, plan.m, plan.k, gm);
  }
  QDEC_CUDA_RETURN(cudaGetLastError());
  GemmParams g = plan.gp;
  g.x = xc;
  g.y = yc;
  g.workspace = ws;
  g.workspace_bytes = plan.gemm_bytes;
  QDEC_RETURN_IF_ERROR(gemm(g, stream));
  const int p_total = p.out_h() * p.out_w();
  const dim3 grid((p_total + 31) / 32, (p.out_channels + 31) / 32, p.batch);
  if (p.dtype == GemmDType::kFP32) {
    nhwc_to_nchw_kernel<true><<<grid, dim3(32, 8), 0, stream>>>(yc, p.output, p.batch, p_total, p.out_channels);
  } else {
    nhwc_to_nchw_kernel<false><<<grid, dim3(32, 8), 0, stream>>>(yc, p.output, p.batch, p_total, p.out_channels);
  }
  QDEC_CUDA_RETURN(cudaGetLastError());
  return Status::Ok();
}

}  // namespace qdec
