// The closed list of compiled decode-attention kernels. Each format-group translation unit
// (decode_16bit.cu, decode_fp8.cu, decode_int8.cu, decode_int4.cu) contributes its entries; the launcher
// looks a request up here and reports an error naming the pair when it is not listed.
#pragma once

#include <span>

#include "qdec/formats.h"

namespace qdec::attention {

struct DecodeKernelInfo {
  KvKind k_kind;
  int k_groups;  // scale groups per row at this head_dim
  KvKind v_kind;
  int v_groups;
  int head_dim;
  const void* func[2];  // __global__ decode_attention_kernel<..., NH> for NH = 1 (group_size <= 8) and 2
  int smem_bytes;       // dynamic shared memory per CTA
};

std::span<const DecodeKernelInfo> decode_kernels_16bit();
std::span<const DecodeKernelInfo> decode_kernels_fp8();
std::span<const DecodeKernelInfo> decode_kernels_int8();
std::span<const DecodeKernelInfo> decode_kernels_int4();

}  // namespace qdec::attention

// Entry for decode_attention_kernel<Fmt<KK, KG>, Fmt<VK, VG>, D, NH> (NH = 1 and 2).
#define QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, NH)                                                 \
  reinterpret_cast<const void*>(                                                                  \
      &::qdec::attention::decode_attention_kernel<::qdec::attention::Fmt<::qdec::KvKind::KK, KG>, \
                                                  ::qdec::attention::Fmt<::qdec::KvKind::VK, VG>, D, NH>)
#define QDEC_DECODE_ENTRY(KK, KG, VK, VG, D)                                                     \
  ::qdec::attention::DecodeKernelInfo {                                                          \
    ::qdec::KvKind::KK, KG, ::qdec::KvKind::VK, VG, D,                                           \
        {QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, 1), QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, 2)},    \
        ::qdec::attention::DecodeSmem<::qdec::attention::Fmt<::qdec::KvKind::KK, KG>,            \
                                      ::qdec::attention::Fmt<::qdec::KvKind::VK, VG>, D>::kBytes \
  }
