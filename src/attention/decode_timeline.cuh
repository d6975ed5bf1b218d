// Device side of decode_timeline.h: the table of one translation unit, the stamp, and the host copy of that table.
// QDEC_DECODE_TIMELINE (probe builds only, CMake option of that name, default off); off, the stamps compile to nothing.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "attention/decode_timeline.h"
#include "runtime/probe_timeline.cuh"

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
  g_decode_timeline[cta * kDecTlSlots + slot] = probe::stamp_value(slot == kDecTlSm);
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
  return probe::table_io(g_decode_timeline, size_t(kDecTlCtas) * kDecTlSlots, reset, out);
#else
  return Status(
      StatusCode::kUnsupported,
      "decode_timeline: the library was built without QDEC_DECODE_TIMELINE (CMake -DQDEC_DECODE_TIMELINE=ON)");
#endif
}

}  // namespace qdec::attention
