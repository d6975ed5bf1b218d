// The W4A8 kernel on Hopper's warpgroup tensor cores (src/int8gemm/w4a8_wgmma.cu; W4A8Path::kWgmma64 / 128 / 256):
// host entry points for w4a8_gemm.cu. Token tiles of 64, 128 or 256 tokens x 128 channels per CTA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "qdec/status.h"

namespace qdec::w4a8 {

struct KernelParams;

// Unsupported (with the reason) unless the device is sm_90 and the library carries sm_90a code for the kernel.
Status wgmma_kernel_supported();
// Resident CTAs per SM of the (tokens, scheme) instantiation; tokens 64, 128 or 256.
Status wgmma_kernel_occupancy(int tokens, bool group, int* blocks);
// Whether a launch of `grid` runs its K splits as thread block clusters (*cluster = grid.z), which add their partials
// through distributed shared memory, or through the workspace and a ticket (*cluster = 1); see wgmma_kernel_launch.
Status wgmma_split_k_cluster(int tokens, bool group, dim3 grid, int* cluster);
// grid: x = (128-channel column) x (token tile), token tiles fastest; z = K splits. X (kp.xq, kp.ldq) is read through a
// TMA tensor map: 16-byte aligned, ldq a multiple of 16 (w4a8_gemm validates both). Nothing is launched on error.
Status wgmma_kernel_launch(int tokens, bool group, const KernelParams& kp, dim3 grid, cudaStream_t stream);

}  // namespace qdec::w4a8
