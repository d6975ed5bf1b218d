// Decode-attention instantiations for int4 caches (row-wise and 2/4/8 groups; 8 groups need head_dim 128)
// and the mixed pairs int8 K / int4 V: (int8, int4) and (int8-g32, int4-g4). At head_dim 128 each has three kernels:
// 8 warps, 4 warps (pages of 16 and 32 tokens) and 16 warps for one head tile (one unsplit CTA per SM); the
// launcher picks (decode_launcher.cu).
#include "attention/decode_dispatch.h"
#include "attention/decode_kernel.cuh"

namespace qdec::attention {

std::span<const DecodeKernelInfo> decode_kernels_int4() {
  static const DecodeKernelInfo kList[] = {
      QDEC_DECODE_ENTRY(kINT4, 1, kINT4, 1, 64),        QDEC_DECODE_ENTRY(kINT4, 2, kINT4, 2, 64),
      QDEC_DECODE_ENTRY(kINT4, 4, kINT4, 4, 64),        QDEC_DECODE_ENTRY_INT4V(kINT4, 1, kINT4, 1, 128),
      QDEC_DECODE_ENTRY_INT4V(kINT4, 2, kINT4, 2, 128), QDEC_DECODE_ENTRY_INT4V(kINT4, 4, kINT4, 4, 128),
      QDEC_DECODE_ENTRY_INT4V(kINT4, 8, kINT4, 8, 128), QDEC_DECODE_ENTRY(kINT8, 1, kINT4, 1, 64),
      QDEC_DECODE_ENTRY(kINT8, 2, kINT4, 4, 64),        QDEC_DECODE_ENTRY_INT4V(kINT8, 1, kINT4, 1, 128),
      QDEC_DECODE_ENTRY_INT4V(kINT8, 4, kINT4, 4, 128),
  };
  return kList;
}

Status decode_timeline_int4(bool reset, std::vector<unsigned long long>* out) {
  return decode_timeline_io(reset, out);
}

}  // namespace qdec::attention
