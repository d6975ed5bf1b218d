// Test helpers for GPU cases: device detection (tests skip, and say why, when there is none), RAII device
// buffers, and CUDA checks that fail the test with the call's name.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "qdec/status.h"

namespace qdec::test {

// Empty string if a CUDA device is usable, otherwise why not.
inline std::string gpu_unavailable_reason() {
  static std::string reason = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(err) + ")";
    }
    if (n == 0) return std::string("no CUDA device (count 0)");
    return std::string();
  }();
  return reason;
}

#define QDEC_SKIP_WITHOUT_GPU()                                     \
  do {                                                              \
    const std::string why = ::qdec::test::gpu_unavailable_reason(); \
    if (!why.empty()) GTEST_SKIP() << "GPU test skipped: " << why;  \
  } while (0)

#define QDEC_CUDA_CHECK(call)                                                                             \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorName(e_) << " " << cudaGetErrorString(e_); \
  } while (0)

#define QDEC_ASSERT_OK(expr)                                   \
  do {                                                         \
    ::qdec::Status s_ = (expr);                                \
    ASSERT_TRUE(s_.ok()) << #expr << " -> " << s_.to_string(); \
  } while (0)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { allocate(bytes); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  cudaError_t allocate(size_t bytes) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = bytes;
    return bytes ? cudaMalloc(&ptr_, bytes) : cudaSuccess;
  }
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace qdec::test
