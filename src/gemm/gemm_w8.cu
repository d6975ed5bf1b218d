// Instantiations of the fused weight-only GEMM for 8-bit weights (fused_kernel.cuh): X bf16 / fp16 x token
// tiles MT = 1, 2, 4, 8 (M <= 8, 16, 32, 64), and at MT = 1 the deep ring (kDeepRingBlocks). The launcher (gemm.cu)
// looks kernels up in this closed list.
#include "gemm/fused_kernel.cuh"

namespace qdec::wq {
namespace {
const FusedKernelInfo kKernels[] = {
    {8, true, 1, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, true, 1>)},
    {8, true, 2, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, true, 2>)},
    {8, true, 4, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, true, 4>)},
    {8, true, 8, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, true, 8>)},
    {8, true, 1, kDeepRingBlocks, reinterpret_cast<const void*>(&fused_gemm_kernel<8, true, 1, kDeepRingBlocks>)},
    {8, false, 1, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, false, 1>)},
    {8, false, 2, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, false, 2>)},
    {8, false, 4, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, false, 4>)},
    {8, false, 8, 1, reinterpret_cast<const void*>(&fused_gemm_kernel<8, false, 8>)},
    {8, false, 1, kDeepRingBlocks, reinterpret_cast<const void*>(&fused_gemm_kernel<8, false, 1, kDeepRingBlocks>)},
};
}  // namespace

Status fused_timeline_w8(bool reset, std::vector<unsigned long long>* out) {
  return fused_timeline_io(reset, out);
}

FusedKernelList fused_kernels_w8() {
  return {kKernels, kKernels + sizeof(kKernels) / sizeof(kKernels[0])};
}

}  // namespace qdec::wq
