// TEMPORARY placeholder (session 3 scaffolding): the W4A8 helper replaces this file with the kernel. Every
// entry point reports Unsupported so that callers (the int8 benchmark) can be written against the API.
#include "qdec/w4a8_gemm.h"

namespace qdec {
namespace {
Status not_yet() { return Status(StatusCode::kUnsupported, "w4a8_gemm: not implemented in this build"); }
}  // namespace
Status w4a8_prepack(const QoQGroupWeights&, W4A8Packed*) { return not_yet(); }
Status w4a8_prepack(const QoQChannelWeights&, W4A8Packed*) { return not_yet(); }
Status w4a8_gemm_workspace_bytes(const W4A8Params&, size_t*) { return not_yet(); }
Status w4a8_gemm(const W4A8Params&, cudaStream_t) { return not_yet(); }
}  // namespace qdec
