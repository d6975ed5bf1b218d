// Test hooks of the activation quantizers (act_quant.cu): not part of the public API.
#pragma once

#include <cuda_runtime.h>

#include "qdec/act_quant.h"
#include "qdec/status.h"

namespace qdec::act_quant_internal {

// rmsnorm_quantize with the streaming kernel's vectors per thread for K <= 4096 forced: 2 (CTAs of 64, 128 or 256
// threads) or 4 (32, 64 or 128), whatever the device's DRAM bandwidth per SM; 0 is the dispatch's own choice. So both
// kernel sets run on any device. Rows the streaming kernels do not take, and K > 4096, are unaffected. Any other
// value is InvalidArgument.
Status rmsnorm_quantize_vectors(const RmsNormQuantParams& p, int vectors, cudaStream_t stream);

}  // namespace qdec::act_quant_internal
