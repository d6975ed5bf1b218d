// The closed list of compiled decode-attention kernels. Each format-group translation unit
// (decode_16bit.cu, decode_fp8.cu, decode_int8.cu, decode_int4.cu) contributes its entries; the launcher
// looks a request up here and reports an error naming the pair when it is not listed.
#pragma once

#include <span>

#include "qdec/formats.h"

namespace qdec::attention {

// One compiled kernel of a format pair: `warps` per CTA, one function per head-tile count (NH = 1 for group_size
// <= 8, NH = 2 for 9..16; nullptr where not compiled). warps == 0: absent.
struct DecodeVariant {
  int warps;
  const void* func[2];
  int smem_bytes;  // dynamic shared memory per CTA
};

struct DecodeKernelInfo {
  KvKind k_kind;
  int k_groups;  // scale groups per row at this head_dim
  KvKind v_kind;
  int v_groups;
  int head_dim;
  DecodeVariant base;         // decode_warps() warps: 8 at head_dim 128, 4 at 64
  DecodeVariant small_pages;  // int4 V at head_dim 128: 4 warps for pages of 16 and 32 tokens
  DecodeVariant wide;         // int4 V at head_dim 128: 16 warps, NH = 1 (decode_launcher.cu says when each runs)
  DecodeVariant narrow;       // 16-bit caches at head_dim 128: 4 warps, two CTAs per SM for one-round grids
};

std::span<const DecodeKernelInfo> decode_kernels_16bit();
std::span<const DecodeKernelInfo> decode_kernels_fp8();
std::span<const DecodeKernelInfo> decode_kernels_int8();
std::span<const DecodeKernelInfo> decode_kernels_int4();

}  // namespace qdec::attention

// Entries: QDEC_DECODE_ENTRY(K kind, K groups, V kind, V groups, head_dim) compiles the base variant;
// QDEC_DECODE_ENTRY_INT4V adds the 4-warp (small pages) and 16-warp (NH = 1) kernels; QDEC_DECODE_ENTRY_NARROW the
// 4-warp kernel of 16-bit caches at head_dim 128.
#define QDEC_DECODE_FMT(K, G) ::qdec::attention::Fmt<::qdec::KvKind::K, G>
#define QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, NH, W) \
  reinterpret_cast<const void*>(                     \
      &::qdec::attention::decode_attention_kernel<QDEC_DECODE_FMT(KK, KG), QDEC_DECODE_FMT(VK, VG), D, NH, W>)
#define QDEC_DECODE_VARIANT(KK, KG, VK, VG, D, W)                                                     \
  ::qdec::attention::DecodeVariant {                                                                  \
    W, {QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, 1, W), QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, 2, W)},    \
        ::qdec::attention::DecodeSmem<QDEC_DECODE_FMT(KK, KG), QDEC_DECODE_FMT(VK, VG), D, W>::kBytes \
  }
#define QDEC_DECODE_VARIANT_NH1(KK, KG, VK, VG, D, W)                                                 \
  ::qdec::attention::DecodeVariant {                                                                  \
    W, {QDEC_DECODE_KERNEL(KK, KG, VK, VG, D, 1, W), nullptr},                                        \
        ::qdec::attention::DecodeSmem<QDEC_DECODE_FMT(KK, KG), QDEC_DECODE_FMT(VK, VG), D, W>::kBytes \
  }
#define QDEC_DECODE_BASE(KK, KG, VK, VG, D) \
  QDEC_DECODE_VARIANT(KK, KG, VK, VG, D,    \
                      (::qdec::attention::decode_warps<QDEC_DECODE_FMT(KK, KG), QDEC_DECODE_FMT(VK, VG), D>()))
#define QDEC_DECODE_NONE             \
  ::qdec::attention::DecodeVariant { \
    0, {nullptr, nullptr}, 0         \
  }
#define QDEC_DECODE_ENTRY(KK, KG, VK, VG, D)                                                                  \
  ::qdec::attention::DecodeKernelInfo {                                                                       \
    ::qdec::KvKind::KK, KG, ::qdec::KvKind::VK, VG, D, QDEC_DECODE_BASE(KK, KG, VK, VG, D), QDEC_DECODE_NONE, \
        QDEC_DECODE_NONE, QDEC_DECODE_NONE                                                                    \
  }
#define QDEC_DECODE_ENTRY_INT4V(KK, KG, VK, VG, D)                                                                  \
  ::qdec::attention::DecodeKernelInfo {                                                                             \
    ::qdec::KvKind::KK, KG, ::qdec::KvKind::VK, VG, D, QDEC_DECODE_BASE(KK, KG, VK, VG, D),                         \
        QDEC_DECODE_VARIANT(KK, KG, VK, VG, D, 4), QDEC_DECODE_VARIANT_NH1(KK, KG, VK, VG, D, 16), QDEC_DECODE_NONE \
  }
#define QDEC_DECODE_ENTRY_NARROW(KK, KG, VK, VG, D)                                                           \
  ::qdec::attention::DecodeKernelInfo {                                                                       \
    ::qdec::KvKind::KK, KG, ::qdec::KvKind::VK, VG, D, QDEC_DECODE_BASE(KK, KG, VK, VG, D), QDEC_DECODE_NONE, \
        QDEC_DECODE_NONE, QDEC_DECODE_VARIANT(KK, KG, VK, VG, D, 4)                                           \
  }
