// Phase timeline of the fused weight-only GEMM kernel (fused_kernel.cuh), for timing studies: a build with
// -DQDEC_FUSED_TIMELINE=ON has lane 0 of every warp record, per call, the slots below into a device table of its
// translation unit (gemm_w4.cu, gemm_w8.cu), which fused_timeline() resets or copies out. `bench_gemm --timeline`
// prints the distributions over the warps of a call (docs/gemm.md, "Session 34"). In other builds the kernel
// records nothing and fused_timeline() returns kUnsupported.
#pragma once

#include <vector>

#include "qdec/status.h"

namespace qdec::wq {

// Slots per warp, in order: %globaltimer (ns) at entry, the SM id, after the prologue's barrier (X and meta
// staged, the first weight tiles requested; under PDL landed too), after the main loop, and at the warp's exit (after
// its Y stores or split-K atomics are issued). Warps are numbered (blockIdx.y * gridDim.x + blockIdx.x) * 8 + warp; at
// most kFusedTlWarps are recorded.
constexpr int kFusedTlEntry = 0, kFusedTlSm = 1, kFusedTlReady = 2, kFusedTlLoopEnd = 3, kFusedTlExit = 4;
constexpr int kFusedTlSlots = 5;
constexpr int kFusedTlWarps = 1 << 16;

// Whether this library was built with QDEC_FUSED_TIMELINE (no CUDA call).
bool fused_timeline_built();
// The table of the int4 (bits 4) or int8 (bits 8) kernels: reset = all zero (a slot still 0 after a call: that
// warp did not run), else copied into *out (kFusedTlWarps * kFusedTlSlots values).
Status fused_timeline_w4(bool reset, std::vector<unsigned long long>* out);
Status fused_timeline_w8(bool reset, std::vector<unsigned long long>* out);
inline Status fused_timeline(int bits, bool reset, std::vector<unsigned long long>* out) {
  return bits == 4 ? fused_timeline_w4(reset, out) : fused_timeline_w8(reset, out);
}

}  // namespace qdec::wq
