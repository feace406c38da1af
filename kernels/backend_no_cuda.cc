// make_backend in a build without the CUDA backend (the default build): --device cuda says how to get one.
#include <string>

#include "base/user_error.h"
#include "kernels/backend.h"

namespace gpt {

bool cuda_backend_built() {
  return false;
}

std::unique_ptr<Ops> make_backend(const std::string& device, int /*local_rank*/) {
  check_device_name(device);
  if (device == "cpu") return nullptr;
  throw UsageError(
      "--device cuda: this binary was built without the CUDA backend; build it with `bazel build "
      "--config=cuda` (the CUDA toolkit is needed) or use --device cpu");
}

std::string describe_backend(const Ops* /*backend*/) {
  return "cpu";
}

BackendGpu backend_gpu(const Ops* /*backend*/) {
  return {};
}

size_t backend_peak_device_bytes(const Ops* /*backend*/) {
  return 0;
}

}  // namespace gpt
