// qdec::Status: how every library call reports failure. The library never prints, exits or aborts;
// a failed call returns a Status whose message names the offending value.
#pragma once

#include <string>
#include <utility>

namespace qdec {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a shape, format, pointer or value the call cannot accept
  kUnsupported,      // valid in principle, but not in the compiled dispatch list
  kCudaError,        // a CUDA runtime call or kernel launch failed
  kOutOfMemory,      // an allocation or a caller-provided workspace was too small
  kNoDevice,         // no usable CUDA device
  kOutOfPages,       // the KV page pool has too few free pages; nothing was changed (preempt, then retry)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: head_dim 96 is not supported (supported: 64, 128)"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Propagate a failed Status to the caller.
#define QDEC_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::qdec::Status qdec_status_ = (expr);        \
    if (!qdec_status_.ok()) return qdec_status_; \
  } while (0)

}  // namespace qdec
