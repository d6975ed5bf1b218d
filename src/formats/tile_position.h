// Where a value lives inside a tile's data region (docs/formats.md, "Data order inside a block16"): one
// definition shared by the CPU ground truth (kv_formats.cpp) and the kernels that write caches (the append
// kernel), so the two cannot drift apart. K and V are the A operand of mma.m16n8k16; a fragment is the four
// registers R0..R3 of one m16 x k16 tile, and slot = 2 r + (0 for lo, 1 for hi) is a value's place in it.
#pragma once

#include <cstdint>

#include "runtime/host_device.h"

namespace qdec::layout {

constexpr int kBlock16 = 16;

// Byte offset of value `dim` of `token` (0..page_size-1) in the data region, and its nibble (4-bit formats:
// 0 low, 1 high; otherwise 0). bits is 16, 8 or 4; data_bytes_per_row is head_dim * bits / 8.
QDEC_HD uint32_t data_offset(int bits, bool is_key, int data_bytes_per_row, int token, int dim, int* nibble) {
  const int block = token / kBlock16;
  const int t = token % kBlock16;
  const int frag = dim / 16;
  int lane, r, hi;
  if (is_key) {
    // m = token, k = dim: register r holds token g + 8 (r & 1), dims 16 f + 2 tig + 8 (r >> 1) + {0, 1}.
    const int k = dim % 16;
    lane = 4 * (t % 8) + (k % 8) / 2;
    r = t / 8 + 2 * (k / 8);
    hi = k % 2;
  } else {
    // m = dim, k = token: register r holds dim 16 f + g + 8 (r & 1), tokens 2 tig + 8 (r >> 1) + {0, 1}.
    const int m = dim % 16;
    lane = 4 * (m % 8) + (t % 8) / 2;
    r = m / 8 + 2 * (t / 8);
    hi = t % 2;
  }
  const int slot = 2 * r + hi;
  int lane_byte;
  *nibble = 0;
  if (bits == 16) {
    lane_byte = 16 * frag + 2 * slot;
  } else if (bits == 8) {
    lane_byte = 8 * frag + slot;
  } else {
    // Fragment f is the 32-bit word at lane offset 4f; nibble i = r + 4 hi holds register r's lo (i < 4) or
    // hi (i >= 4) value, so (word >> 4r) & 0x000F000F is register r.
    const int i = r + 4 * hi;
    lane_byte = 4 * frag + i / 2;
    *nibble = i % 2;
  }
  return static_cast<uint32_t>(block * kBlock16 * data_bytes_per_row + (lane_byte / 16) * 512 + lane * 16 +
                               lane_byte % 16);
}

}  // namespace qdec::layout
