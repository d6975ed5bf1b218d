// Split-K merge for decode attention (decode_merge.cu).
#pragma once

#include <cuda_runtime.h>

#include "qdec/status.h"

namespace qdec::attention {

Status launch_decode_merge(const float* part_o, const float* part_lse, void* o, float* lse, int rows, int num_splits,
                           int head_dim, bool q_is_fp16, cudaStream_t stream);

}  // namespace qdec::attention
