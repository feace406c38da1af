// make_backend's name check, shared by the builds with and without the CUDA backend (backend_cuda.cc,
// backend_no_cuda.cc).
#include "kernels/backend.h"

#include "base/user_error.h"

namespace gpt {

void check_device_name(const std::string& device) {
  if (device != "cpu" && device != "cuda")
    throw UsageError("--device " + device + ": unknown device; use one of " + kDeviceNames);
}

}  // namespace gpt
