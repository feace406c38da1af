// Choosing the device seam's backend by name (gpt_train's --device, the benches' and gpt_generate's): "cpu"
// (the default, kernels/cpu) or "cuda" (kernels/cuda, in a build made with --config=cuda). One rank drives
// one GPU: rank r on a node uses device r mod (devices on the machine), so several ranks may share a GPU.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend_gpu.h"
#include "kernels/ops.h"

namespace gpt {

// The names --device accepts, for help texts and errors: "cpu|cuda".
inline constexpr const char* kDeviceNames = "cpu|cuda";

// Throws UsageError unless device is one of kDeviceNames.
void check_device_name(const std::string& device);

// Whether this binary was built with the CUDA backend (--config=cuda).
bool cuda_backend_built();

// The backend for `device` on the rank with index local_rank on its node: nullptr for "cpu" (callers use
// cpu_ops()), a CudaOps for "cuda". Throws UsageError with one line when the name is unknown, when the binary
// has no CUDA backend, or when no CUDA device is present (naming what the driver answered).
std::unique_ptr<Ops> make_backend(const std::string& device, int local_rank);

// One line for banners: "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB)".
std::string describe_backend(const Ops* backend);

// The GPU a backend drives (kernels/backend_gpu.h), for MFU's datasheet peak; empty for the CPU.
BackendGpu backend_gpu(const Ops* backend);

// The most device memory this process has held at once on the backend (0 for the CPU, whose peak is the
// process's resident set): for the memory table.
size_t backend_peak_device_bytes(const Ops* backend);

}  // namespace gpt
