// The workspace layout rule shared by the GEMM-family calls (gemm, conv2d, w8a8_gemm, w4a8_gemm), so that one
// buffer, zero-filled once after allocation, can serve every call and every path in turn (prefill and decode
// calls of several layers, say):
//
//   [0, kWorkspaceStateBytes)   split-K state: tile counters and partial sums accumulated by atomics. It must be
//                               zero when a call starts, and every call that uses it leaves it zero again.
//   [kWorkspaceStateBytes, ...) scratch a call writes before it reads it: the dequantized weight, cuBLASLt's output
//                               and workspace, per-split partials, im2col, the W4A8 wgmma paths' permuted X. Never
//                               assumed zero; never placed in the state zone, where it would be read as counters by
//                               a later split-K call.
//
// A call whose split-K state would not fit the zone runs without split-K when the split count is automatic and is
// refused (InvalidArgument) when it is forced. *_workspace_bytes() includes the zone for every path that uses scratch.
#pragma once

#include <cstddef>

namespace qdec {

inline constexpr size_t kWorkspaceStateBytes = size_t(16) << 20;

}  // namespace qdec
