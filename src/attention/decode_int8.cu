// Decode-attention instantiations for int8 caches: row-wise, groups of 64 and groups of 32
// (group counts 1/2/4 at head_dim 128, 1/2 at head_dim 64).
#include "attention/decode_dispatch.h"
#include "attention/decode_kernel.cuh"

namespace qdec::attention {

std::span<const DecodeKernelInfo> decode_kernels_int8() {
  static const DecodeKernelInfo kList[] = {
      QDEC_DECODE_ENTRY(kINT8, 1, kINT8, 1, 64),  QDEC_DECODE_ENTRY(kINT8, 2, kINT8, 2, 64),
      QDEC_DECODE_ENTRY(kINT8, 1, kINT8, 1, 128), QDEC_DECODE_ENTRY(kINT8, 2, kINT8, 2, 128),
      QDEC_DECODE_ENTRY(kINT8, 4, kINT8, 4, 128),
  };
  return kList;
}

Status decode_timeline_int8(bool reset, std::vector<unsigned long long>* out) {
  return decode_timeline_io(reset, out);
}

}  // namespace qdec::attention
