// Decode-attention instantiations for FP8 caches (e4m3, e5m2; one fp32 scale per row).
#include "attention/decode_dispatch.h"
#include "attention/decode_kernel.cuh"

namespace qdec::attention {

std::span<const DecodeKernelInfo> decode_kernels_fp8() {
  static const DecodeKernelInfo kList[] = {
      QDEC_DECODE_ENTRY(kFP8E4M3, 1, kFP8E4M3, 1, 64),
      QDEC_DECODE_ENTRY(kFP8E4M3, 1, kFP8E4M3, 1, 128),
      QDEC_DECODE_ENTRY(kFP8E5M2, 1, kFP8E5M2, 1, 64),
      QDEC_DECODE_ENTRY(kFP8E5M2, 1, kFP8E5M2, 1, 128),
  };
  return kList;
}

Status decode_timeline_fp8(bool reset, std::vector<unsigned long long>* out) {
  return decode_timeline_io(reset, out);
}

}  // namespace qdec::attention
