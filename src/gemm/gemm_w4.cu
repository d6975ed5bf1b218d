// Instantiations of the fused weight-only GEMM for 4-bit weights (fused_kernel.cuh): X bf16 / fp16 x token
// tiles MT = 1, 2, 4, 8 (M <= 8, 16, 32, 64). The launcher (gemm.cu) looks kernels up in this closed list.
#include "gemm/fused_kernel.cuh"

namespace qdec::wq {
namespace {
const FusedKernelInfo kKernels[] = {
    {4, true, 1, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, true, 1>)},
    {4, true, 2, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, true, 2>)},
    {4, true, 4, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, true, 4>)},
    {4, true, 8, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, true, 8>)},
    {4, false, 1, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, false, 1>)},
    {4, false, 2, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, false, 2>)},
    {4, false, 4, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, false, 4>)},
    {4, false, 8, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<4, false, 8>)},
};
}  // namespace

bool fused_timeline_built() {
  return QDEC_FUSED_TIMELINE != 0;
}

Status fused_timeline_w4(bool reset, std::vector<unsigned long long>* out) {
  return fused_timeline_io(reset, out);
}

FusedKernelList fused_kernels_w4() {
  return {kKernels, kKernels + sizeof(kKernels) / sizeof(kKernels[0])};
}

}  // namespace qdec::wq
