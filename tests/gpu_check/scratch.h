// Tensors on both backends at once: a Twin holds the same starting bytes in CpuOps' memory and in CudaOps'
// device memory, so a check runs an op on each and compares what comes back. A Scratch owns the twins of one
// check (two arenas), and gives the memory back when the check ends.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "tensor/arena.h"

namespace gpt::gpu_check {

struct Twin {
  Tensor cpu, gpu;
  std::vector<uint8_t> init;  // the bytes both sides start from (reset() puts them back)
  const Tensor& on(bool gpu_side) const { return gpu_side ? gpu : cpu; }
};

// The two backends every check compares.
struct Backends {
  CpuOps& cpu = cpu_ops();
  cuda::CudaOps gpu{0};
  Ops& on(bool gpu_side) { return gpu_side ? static_cast<Ops&>(gpu) : static_cast<Ops&>(cpu); }
};

class Scratch {
 public:
  explicit Scratch(Backends& backends);

  // Standard normal values times scale (counter-based, so the same seed gives the same values anywhere).
  Twin& random(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f);
  Twin& values(std::vector<int64_t> shape, const std::vector<float>& values);
  // Token ids below vocab, half of them from the 64 most frequent ids (repeats stress the embedding's
  // gradient sums).
  Twin& tokens(std::vector<int64_t> shape, int vocab, uint64_t seed);
  // Any dtype, from raw bytes (nbytes of the shape); empty bytes: zeros.
  Twin& raw(std::vector<int64_t> shape, DType dtype, std::vector<uint8_t> bytes);

  // Puts the starting bytes back on one side.
  void reset(const Twin& t, bool gpu_side);
  // Rounds the GPU copy (fp32) to fp16 or bf16 and back, with CudaOps::cast: the precision of compute
  // weights.
  void round_on_gpu(const Twin& t, DType half);
  std::vector<uint8_t> bytes(const Twin& t, bool gpu_side);
  std::vector<float> floats(const Twin& t, bool gpu_side);

  Backends& backends() { return backends_; }

 private:
  Backends& backends_;
  Arena cpu_arena_;
  Arena gpu_arena_;
  std::deque<Twin> twins_;  // a deque: references stay valid as it grows
};

// Counter-based standard normal values (kernels/common/random.h), filled in parallel.
std::vector<float> normal_values(int64_t n, uint64_t seed, float scale = 1.0f);

}  // namespace gpt::gpu_check
