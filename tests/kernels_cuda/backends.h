// What the CUDA backend's tests share: whether a device is present (printing SKIPPED: when not), random
// inputs, and a pair of backends (CpuOps and CudaOps) with an arena each, so a test uploads the same host
// values to both and compares what comes back.
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "tensor/arena.h"
#include "tests/skip.h"

namespace gpt::testing {

inline bool have_device() {
  const gpt::cuda::DeviceProbe probe = gpt::cuda::probe_devices();
  if (probe.count > 0) return true;
  gpt::testing::skipped("CudaOps vs CpuOps: no CUDA device is present (%s)", probe.problem.c_str());
  return false;
}

inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// The same host values on both backends, in device memory.
struct Pair {
  gpt::Tensor cpu, gpu;
};

class Backends {
 public:
  Backends() : gpu_arena_("cuda", gpt::Arena::kUnlimited, &gpu.device_memory()) {}
  Pair make(const std::vector<float>& values, std::vector<int64_t> shape) {
    Pair p{cpu_arena_.allocate_tensor("t", "test", shape, gpt::DType::kF32),
           gpu_arena_.allocate_tensor("t", "test", shape, gpt::DType::kF32)};
    cpu.upload(p.cpu, values.data());
    gpu.upload(p.gpu, values.data());
    return p;
  }
  gpt::Tensor make_like(const gpt::Tensor& t, gpt::DType dtype) {
    return gpu_arena_.allocate_tensor("t", "test", t.shape, dtype);
  }
  gpt::Tensor make_cpu_like(const gpt::Tensor& t, gpt::DType dtype) {
    return cpu_arena_.allocate_tensor("t", "test", t.shape, dtype);
  }
  template <typename T>
  std::vector<T> host(gpt::Ops& ops, const gpt::Tensor& t) {
    std::vector<T> out(t.nbytes() / sizeof(T));
    ops.download(out.data(), t);
    return out;
  }

  gpt::CpuOps& cpu = gpt::cpu_ops();
  gpt::cuda::CudaOps gpu{0};

 private:
  gpt::Arena cpu_arena_;
  gpt::Arena gpu_arena_;
};

}  // namespace gpt::testing
