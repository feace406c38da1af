// The GPU a backend drives, as MFU's datasheet peak needs it (train/peak_flops.h), apart from the backend
// itself: what needs only these facts does not depend on kernels:backend, and so not on the CUDA backend.
#pragma once

#include <string>

namespace gpt {

// Its name and compute capability, its index and how many GPUs the machine has (to count the ranks sharing
// it). For the CPU: empty name, 0s. kernels/backend.h's backend_gpu() reads it off a backend.
struct BackendGpu {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;
  int index = 0, count = 0;
};

}  // namespace gpt
