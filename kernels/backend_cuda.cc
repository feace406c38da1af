// make_backend in a build with the CUDA backend (--config=cuda).
#include <string>

#include "base/user_error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"

namespace gpt {

bool cuda_backend_built() {
  return true;
}

std::unique_ptr<Ops> make_backend(const std::string& device, int local_rank) {
  check_device_name(device);
  if (device == "cpu") return nullptr;
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    throw UsageError("--device cuda: no CUDA device is usable on this machine (" + probe.problem +
                     "); run on a machine with an NVIDIA GPU and its driver, or use --device cpu");
  }
  return std::make_unique<cuda::CudaOps>(local_rank % probe.count);
}

std::string describe_backend(const Ops* backend) {
  const auto* gpu = dynamic_cast<const cuda::CudaOps*>(backend);
  if (!gpu) return "cpu";
  return "cuda:" + std::to_string(gpu->context().info().index) + " (" + gpu->context().info().describe() +
         ")";
}

BackendGpu backend_gpu(const Ops* backend) {
  const auto* gpu = dynamic_cast<const cuda::CudaOps*>(backend);
  if (!gpu) return {};
  const cuda::DeviceInfo& info = gpu->context().info();
  return {info.name, info.major, info.minor, info.index, cuda::probe_devices().count};
}

size_t backend_peak_device_bytes(const Ops* backend) {
  const auto* gpu = dynamic_cast<const cuda::CudaOps*>(backend);
  return gpu ? gpu->peak_device_bytes() : 0;
}

}  // namespace gpt
