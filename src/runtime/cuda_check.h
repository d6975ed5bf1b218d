// Turning CUDA runtime errors into qdec::Status values that name the failing call.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "qdec/status.h"

namespace qdec {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError,
                std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// Evaluate a CUDA runtime call; on failure return a Status naming the call.
#define QDEC_CUDA_RETURN(call) QDEC_RETURN_IF_ERROR(::qdec::cuda_status((call), #call))

struct DeviceInfo {
  int device = 0;
  int sm_count = 0;
  int l2_bytes = 0;
  int max_smem_per_block_optin = 0;
  int cc_major = 0;
  int cc_minor = 0;
  std::string name;
};

// Properties of the current device (cached per device). kNoDevice if there is none.
Status current_device_info(DeviceInfo* info);

}  // namespace qdec
