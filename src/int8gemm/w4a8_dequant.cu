// W4A8 prepacked weights -> int8 weights for the W8A8 kernels (w4a8_dequant.h). The 64 bytes of lanes 4g .. 4g + 3 of
// a tile hold channels g and g + 8 whole (w4a8_layout.h: lane t's word 2s + h has K 32s + 4t + 0..3 in its low nibbles
// and 32s + 16 + 4t + 0..3 in its high nibbles), so two threads share them: thread (tile, g, half) loads the 64 bytes
// and writes the 16-byte runs K 32s + 16 half .. + 15 of both channels (four 16-byte stores), the pair's two threads
// thus the two halves of every 32-byte sector in the same store instruction. The (s1, z * s1) of both channels are one
// 32-bit meta word per group. The codes are read once (streaming loads); the int8 output keeps the default store
// policy, since the GEMM reads it right after.
#include <cuda_fp16.h>

#include <algorithm>

#include "int8gemm/w4a8_dequant.h"
#include "runtime/cuda_check.h"

namespace qdec::w4a8 {

namespace {

struct DequantArgs {
  const uint4* codes;
  const uint8_t* meta;     // qoq-g: [n_blocks][num_groups] x 32 bytes
  const uint16_t* scales;  // fp16 bits [n_pad]
  const uint8_t* zeros;    // qoq-c: [n_pad]
  int8_t* q;               // [n, k]
  float* q_scales;         // [n]
  int n, k, k_tiles, num_groups, group_shift;
  long long units;  // n_blocks * k_tiles * 16: (tile, g, half)
};

template <bool kGroup>
__global__ void __launch_bounds__(256) dequant_kernel(DequantArgs a) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (long long i = first; i < a.units; i += stride) {
    const long long tile = i >> 4;
    const int g = static_cast<int>(i >> 1) & 7, half = static_cast<int>(i & 1);
    const int nb = static_cast<int>(tile / a.k_tiles),
              kt = static_cast<int>(tile - static_cast<long long>(nb) * a.k_tiles);
    uint4 w[4];  // lanes 4g + t
#pragma unroll
    for (int t = 0; t < 4; ++t) w[t] = __ldcs(a.codes + tile * 32 + 4 * g + t);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int col = kt * kTileK + 32 * s;
      uint32_t mw = 0;  // qoq-g: (s1, z * s1) of channel g in bytes 0-1, of channel g + 8 in bytes 2-3
      if constexpr (kGroup)
        mw = __ldg(reinterpret_cast<const uint32_t*>(
                       a.meta + (static_cast<size_t>(nb) * a.num_groups + (col >> a.group_shift)) * kMetaBytes) +
                   g);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = nb * kTileN + g + 8 * h;
        if (row >= a.n) break;
        const uint32_t s1 = kGroup ? (mw >> (16 * h)) & 0xFF : 1u;
        const uint32_t bias = dequant_bias(kGroup ? (mw >> (16 * h + 8)) & 0xFF : a.zeros[row]);
        uint32_t v[4];  // word 2s + h of lane t, its low (half 0) or high (half 1) nibbles: K col + 16 half + 4t + 0..3
#pragma unroll
        for (int t = 0; t < 4; ++t)
          v[t] = ((s ? (h ? w[t].w : w[t].z) : (h ? w[t].y : w[t].x)) >> (4 * half)) & 0x0F0F0F0Fu;
        uint4 o;
        o.x = dequant4(v[0], s1, bias);
        o.y = dequant4(v[1], s1, bias);
        o.z = dequant4(v[2], s1, bias);
        o.w = dequant4(v[3], s1, bias);
        *reinterpret_cast<uint4*>(a.q + static_cast<size_t>(row) * a.k + col + 16 * half) = o;
      }
    }
  }
  for (long long i = first; i < a.n; i += stride) a.q_scales[i] = __half2float(__ushort_as_half(a.scales[i]));
}

}  // namespace

Status dequantize_to_int8(const PackedLayout& lay, const void* data, int8_t* q, float* scales, cudaStream_t stream) {
  DeviceInfo dev;
  QDEC_RETURN_IF_ERROR(current_device_info(&dev));
  const auto* base = static_cast<const uint8_t*>(data);
  const bool group = lay.group_size != 0;
  DequantArgs a{};
  a.codes = reinterpret_cast<const uint4*>(base);
  a.meta = group ? base + lay.meta_offset() : nullptr;
  a.scales = reinterpret_cast<const uint16_t*>(base + lay.scale_offset());
  a.zeros = group ? nullptr : base + lay.zero_offset();
  a.q = q;
  a.q_scales = scales;
  a.n = lay.n;
  a.k = lay.k;
  a.k_tiles = lay.k_tiles();
  a.num_groups = lay.num_groups();
  a.group_shift = lay.group_size == 32 ? 5 : lay.group_size == 64 ? 6 : 7;
  a.units = static_cast<long long>(lay.n_blocks()) * lay.k_tiles() * 16;
  // Enough resident threads to keep HBM busy (8 CTAs of 256 per SM); the loop covers the rest.
  const long long want = std::max<long long>((a.units + 255) / 256, (lay.n + 255) / 256);
  const unsigned blocks = static_cast<unsigned>(std::clamp<long long>(want, 1, 8LL * dev.sm_count));
  if (group) {
    dequant_kernel<true><<<blocks, 256, 0, stream>>>(a);
  } else {
    dequant_kernel<false><<<blocks, 256, 0, stream>>>(a);
  }
  return cuda_status(cudaGetLastError(), "w4a8 dequant_kernel launch");
}

}  // namespace qdec::w4a8
