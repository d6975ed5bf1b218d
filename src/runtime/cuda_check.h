// Turning CUDA runtime errors into qdec::Status values that name the failing call.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

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
  int smem_per_sm = 0;              // shared memory of an SM (bytes)
  int reserved_smem_per_block = 0;  // shared memory the system reserves for each resident CTA (bytes)
  int cc_major = 0;
  int cc_minor = 0;
  // Theoretical DRAM bandwidth in 10^9 bytes/s (2 x memory clock x bus width); 0 where the driver reports neither.
  double dram_gbps = 0.0;
  std::string name;
};

// Raise a kernel's dynamic shared-memory limit to `smem` bytes on the current device, once per (device, kernel) and
// only upward (the weight-only GEMM's fused and wgmma kernels).
inline Status raise_dynamic_smem(const void* func, int smem) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> raised;
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  int& cur = raised[{dev, func}];
  if (smem > cur) {
    QDEC_CUDA_RETURN(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cur = smem;
  }
  return Status::Ok();
}

// A kernel launch configuration, optionally as a programmatic dependent of the previous work in the stream
// (programmatic dependent launch: the kernel may start before its predecessor ends and must order itself with
// griddepcontrol.wait), optionally in thread block clusters. Pass `get()` to cudaLaunchKernelEx / cudaLaunchKernelExC.
// Not copyable: the config points at its own attributes.
class LaunchConfig {
 public:
  LaunchConfig(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, bool programmatic) {
    cfg_.gridDim = grid;
    cfg_.blockDim = block;
    cfg_.dynamicSmemBytes = smem_bytes;
    cfg_.stream = stream;
    cfg_.attrs = attrs_;
    if (programmatic) {
      attrs_[cfg_.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs_[cfg_.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
  // Launch as thread block clusters of `dims` CTAs (each grid dimension a multiple of its cluster dimension); a second
  // call replaces the first.
  void set_cluster(dim3 dims) {
    unsigned i = 0;
    while (i < cfg_.numAttrs && attrs_[i].id != cudaLaunchAttributeClusterDimension) ++i;
    if (i == cfg_.numAttrs) ++cfg_.numAttrs;
    attrs_[i].id = cudaLaunchAttributeClusterDimension;
    attrs_[i].val.clusterDim.x = dims.x;
    attrs_[i].val.clusterDim.y = dims.y;
    attrs_[i].val.clusterDim.z = dims.z;
  }
  const cudaLaunchConfig_t* get() const { return &cfg_; }

 private:
  cudaLaunchConfig_t cfg_{};
  cudaLaunchAttribute attrs_[2]{};
};

// Properties of the current device (cached per device). kNoDevice if there is none.
Status current_device_info(DeviceInfo* info);

#ifndef QDEC_HAS_SM90A
#define QDEC_HAS_SM90A 0  // set by CMake: 1 where CMAKE_CUDA_ARCHITECTURES has an sm_90a target
#endif

// kUnsupported, naming `what` and the reason, unless the current device is sm_90 and kKernel (a __global__ function of
// this library) carries sm_90a code. The binary version is a property of the build: asked once per kernel. It cannot
// tell sm_90a code from code JIT-compiled for the sm_90 device out of another target's PTX (an sm_80 build on an H100:
// binary version 90, the wgmma body empty), hence the build's own flag first.
template <auto kKernel>
Status sm90a_kernel_status(const std::string& what) {
  DeviceInfo dev;
  QDEC_RETURN_IF_ERROR(current_device_info(&dev));
  if (dev.cc_major != 9 || dev.cc_minor != 0)
    return Status(StatusCode::kUnsupported, what + ": needs an sm_90 device (this one is sm_" +
                                                std::to_string(dev.cc_major) + std::to_string(dev.cc_minor) + ")");
  if (!QDEC_HAS_SM90A)
    return Status(StatusCode::kUnsupported,
                  what + ": needs sm_90a code, which this build lacks (CMAKE_CUDA_ARCHITECTURES has no 90a target)");
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  static int binary_version = 0;
  std::call_once(once, [] {
    cudaFuncAttributes attr{};
    attr_err = cudaFuncGetAttributes(&attr, kKernel);
    binary_version = attr.binaryVersion;
  });
  QDEC_CUDA_RETURN(attr_err);
  if (binary_version != 90)
    return Status(StatusCode::kUnsupported,
                  what + ": needs sm_90a code, which this build lacks (binary " + std::to_string(binary_version) + ")");
  return Status::Ok();
}

}  // namespace qdec
