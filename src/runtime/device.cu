// Device properties, read once per device.
#include <array>
#include <mutex>

#include "runtime/cuda_check.h"

namespace qdec {

Status current_device_info(DeviceInfo* info) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky "no device" error so later probes behave
    return Status(StatusCode::kNoDevice, std::string("no CUDA device: cudaGetDeviceCount returned ") +
                                             cudaGetErrorName(err) + ", count " + std::to_string(count));
  }
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::array<DeviceInfo, 64> cache;
  static std::array<bool, 64> have{};
  std::lock_guard<std::mutex> lock(mu);
  if (dev < 64 && have[dev]) {
    *info = cache[dev];
    return Status::Ok();
  }
  cudaDeviceProp prop{};
  QDEC_CUDA_RETURN(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.device = dev;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = prop.l2CacheSize;
  d.max_smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  d.smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
  d.reserved_smem_per_block = static_cast<int>(prop.reservedSharedMemPerBlock);
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.name = prop.name;
  int mem_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess) {
    d.dram_gbps = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  } else {
    (void)cudaGetLastError();  // an unsupported attribute: the bandwidth stays unknown (0)
  }
  if (dev < 64) {
    cache[dev] = d;
    have[dev] = true;
  }
  *info = d;
  return Status::Ok();
}

}  // namespace qdec
