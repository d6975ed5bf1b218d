// Shared pieces of the phase-timeline probes (src/gemm/fused_timeline.h, src/attention/decode_timeline.h): what a
// stamp records, and the host side of a translation unit's device table of stamps. Each probe keeps its own table,
// slots and CMake option; its kernels stamp only in probe builds.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "qdec/status.h"
#include "runtime/cuda_check.h"

namespace qdec::probe {

// The value of one stamp: the SM's id (smid) or %globaltimer in ns (which advances in steps of 256 ns on the H200).
__device__ __forceinline__ unsigned long long stamp_value(bool smid) {
  unsigned long long t;
  if (smid) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    t = sm;
  } else {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  }
  return t;
}

// A table of `values` stamps at `symbol` (a __device__ array of unsigned long long): zeroed (reset), else copied
// into *out.
inline Status table_io(const void* symbol, size_t values, bool reset, std::vector<unsigned long long>* out) {
  if (reset) {
    const std::vector<unsigned long long> zero(values, 0);
    QDEC_CUDA_RETURN(cudaMemcpyToSymbol(symbol, zero.data(), values * sizeof(zero[0])));
    return Status::Ok();
  }
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "probe table: null output");
  out->resize(values);
  QDEC_CUDA_RETURN(cudaMemcpyFromSymbol(out->data(), symbol, values * sizeof((*out)[0])));
  return Status::Ok();
}

}  // namespace qdec::probe
