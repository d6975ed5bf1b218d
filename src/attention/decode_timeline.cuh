// Device side of decode_timeline.h: the table of one translation unit, the stamp, and the host copy of that table.
// QDEC_DECODE_TIMELINE (probe builds only, CMake option of that name, default off); off, the stamps compile to nothing.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "attention/decode_timeline.h"
#include "runtime/cuda_check.h"

#ifndef QDEC_DECODE_TIMELINE
#define QDEC_DECODE_TIMELINE 0
#endif

namespace qdec::attention {

#if QDEC_DECODE_TIMELINE
static __device__ unsigned long long g_decode_timeline[kDecTlCtas * kDecTlSlots];
#endif

__device__ __forceinline__ void decode_stamp([[maybe_unused]] int slot) {
#if QDEC_DECODE_TIMELINE
  if (threadIdx.x != 0) return;
  const unsigned cta = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (cta >= unsigned(kDecTlCtas)) return;
  unsigned long long t;
  if (slot == kDecTlSm) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    t = sm;
  } else {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  }
  g_decode_timeline[cta * kDecTlSlots + slot] = t;
#endif
}

// Stamps a CTA's exit wherever the kernel returns.
struct DecodeStampAtExit {
  __device__ ~DecodeStampAtExit() { decode_stamp(kDecTlExit); }
};

// The host side of decode_timeline_<unit>, over this translation unit's table.
[[maybe_unused]] static Status decode_timeline_io([[maybe_unused]] bool reset,
                                                  [[maybe_unused]] std::vector<unsigned long long>* out) {
#if QDEC_DECODE_TIMELINE
  if (reset) {
    const std::vector<unsigned long long> zero(size_t(kDecTlCtas) * kDecTlSlots, 0);
    QDEC_CUDA_RETURN(cudaMemcpyToSymbol(g_decode_timeline, zero.data(), zero.size() * sizeof(zero[0])));
    return Status::Ok();
  }
  out->resize(size_t(kDecTlCtas) * kDecTlSlots);
  QDEC_CUDA_RETURN(cudaMemcpyFromSymbol(out->data(), g_decode_timeline, out->size() * sizeof((*out)[0])));
  return Status::Ok();
#else
  return Status(
      StatusCode::kUnsupported,
      "decode_timeline: the library was built without QDEC_DECODE_TIMELINE (CMake -DQDEC_DECODE_TIMELINE=ON)");
#endif
}

}  // namespace qdec::attention
