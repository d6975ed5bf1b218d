// The byte layout of prepacked W4A8 weights (docs/formats.md, "W4A8 kernel layout"), shared by the host prepack
// and the kernel so that both compute every offset the same way.
//
//   codes   [n_blocks][k_tiles] tiles of 16 channels x 64 K, 512 bytes each: lane L = 4g + t holds 16 bytes =
//           4 words, word 2s + h = channel 16 nb + g + 8h and k-step s: byte i's low nibble K 64 kt + 32s + 4t + i,
//           its high nibble K 64 kt + 32s + 16 + 4t + i (i = 0..3), the K positions of the lane's A fragments in
//           mma.m16n8k32 and wgmma (K in natural order: X is read as the caller stores it)
//   meta    qoq-g only: [n_blocks][num_groups] x 32 bytes, lane word g = (s1, z*s1) of channel g, then of g + 8
//   scales  [n_pad] fp16 bits (qoq-g: s0, qoq-c: s)
//   zeros   qoq-c only: [n_pad] bytes
// Each region starts 16-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qdec::w4a8 {

constexpr int kTileN = 16;          // channels per tile: the m = 16 side of mma.m16n8k32
constexpr int kTileK = 64;          // K values per tile: two k-steps of 32
constexpr int kTileBytes = 512;     // 16 x 64 nibbles = 32 lanes x 16 bytes
constexpr int kMetaBytes = 32;      // per (channel block, group): 8 lane words of 4 bytes
constexpr int kMaxGroupScale = 17;  // q * s1 <= 15 * 17 = 255 stays in a byte

struct PackedLayout {
  int n = 0, k = 0, group_size = 0;

  __host__ __device__ constexpr int n_blocks() const { return (n + kTileN - 1) / kTileN; }
  __host__ __device__ constexpr int n_pad() const { return n_blocks() * kTileN; }
  __host__ __device__ constexpr int k_tiles() const { return k / kTileK; }
  __host__ __device__ constexpr int num_groups() const { return group_size > 0 ? k / group_size : 0; }
  __host__ __device__ static constexpr size_t align16(size_t v) { return (v + 15) / 16 * 16; }

  __host__ __device__ constexpr size_t code_bytes() const {
    return size_t(n_blocks()) * size_t(k_tiles()) * kTileBytes;
  }
  __host__ __device__ constexpr size_t meta_offset() const { return code_bytes(); }
  __host__ __device__ constexpr size_t meta_bytes() const {
    return size_t(n_blocks()) * size_t(num_groups()) * kMetaBytes;
  }
  __host__ __device__ constexpr size_t scale_offset() const { return align16(meta_offset() + meta_bytes()); }
  __host__ __device__ constexpr size_t zero_offset() const { return align16(scale_offset() + size_t(n_pad()) * 2); }
  __host__ __device__ constexpr size_t total_bytes() const {
    return align16(zero_offset() + (group_size == 0 ? size_t(n_pad()) : 0));
  }

  // Byte holding the code of (row, col) and the nibble's shift (0 or 4).
  __host__ __device__ constexpr size_t code_byte(int row, int col, int* shift) const {
    const int nb = row / kTileN, r = row % kTileN, g = r % 8, h = r / 8;
    const int kt = col / kTileK, c = col % kTileK, s = c / 32, hi = (c % 32) / 16, t = (c % 16) / 4, i = c % 4;
    *shift = 4 * hi;
    return (size_t(nb) * k_tiles() + kt) * kTileBytes + size_t(g * 4 + t) * 16 + size_t(s * 2 + h) * 4 + i;
  }
  // Offset of s1 of (row, group); z * s1 is the next byte.
  __host__ __device__ constexpr size_t meta_byte(int row, int group) const {
    const int nb = row / kTileN, r = row % kTileN;
    return meta_offset() + (size_t(nb) * num_groups() + group) * kMetaBytes + size_t(r % 8) * 4 + size_t(r / 8) * 2;
  }
};

// Four codes (one per byte, 0..15) -> four int8 (q - z) * s1 (two's complement bytes), with
// bias = dequant_bias(z * s1). Per byte q * s1 + 128 - z * s1 = (q - z) * s1 + 128 lies in 0..255 whenever
// (q - z) * s1 fits in int8 (the prepack checks it), so the 32-bit sum has no carries between bytes even where
// the bias word itself borrowed (z * s1 > 128), and ^ 0x80 per byte removes the +128. qoq-c uses s1 = 1.
__host__ __device__ constexpr uint32_t dequant_bias(uint32_t zs1) {
  return 0x80808080u - zs1 * 0x01010101u;
}
__host__ __device__ constexpr uint32_t dequant4(uint32_t q4, uint32_t s1, uint32_t bias) {
  return (q4 * s1 + bias) ^ 0x80808080u;
}

}  // namespace qdec::w4a8
