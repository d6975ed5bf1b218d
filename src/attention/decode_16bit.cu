// Decode-attention instantiations for 16-bit caches (bf16 with bf16 Q, fp16 with fp16 Q).
#include "attention/decode_dispatch.h"
#include "attention/decode_kernel.cuh"

namespace qdec::attention {

std::span<const DecodeKernelInfo> decode_kernels_16bit() {
  static const DecodeKernelInfo kList[] = {
      QDEC_DECODE_ENTRY(kBF16, 1, kBF16, 1, 64),
      QDEC_DECODE_ENTRY_NARROW(kBF16, 1, kBF16, 1, 128),
      QDEC_DECODE_ENTRY(kFP16, 1, kFP16, 1, 64),
      QDEC_DECODE_ENTRY_NARROW(kFP16, 1, kFP16, 1, 128),
  };
  return kList;
}

Status decode_timeline_16bit(bool reset, std::vector<unsigned long long>* out) {
  return decode_timeline_io(reset, out);
}

}  // namespace qdec::attention
