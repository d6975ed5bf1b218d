#include "qdec/status.h"

namespace qdec {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "Ok";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kCudaError:
      return "CudaError";
    case StatusCode::kOutOfMemory:
      return "OutOfMemory";
    case StatusCode::kNoDevice:
      return "NoDevice";
    case StatusCode::kOutOfPages:
      return "OutOfPages";
  }
  // A value outside the enum (a cast from a corrupt int) must still yield a printable name.
  return "Unknown";
}

std::string Status::to_string() const {
  std::string s = status_code_name(code_);
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

}  // namespace qdec
