// Runs the CUDA kernels on random data and compares them with a naive double-precision host reference,
// element by element, against a rigorous error bound (the rounding of the output to its dtype plus the worst
// case of fp32 accumulation). Shared by the cuda_smoke binary and tests/kernels_cuda.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "tensor/tensor.h"

namespace gpt::cuda {

struct Measurement {
  std::string what;          // e.g. "linear f16 forward out[256,3072]"
  double max_abs_error = 0;  // largest |device - reference|
  double worst_ratio = 0;    // largest |device - reference| / bound; the check passes when <= 1
  bool ok() const { return worst_ratio <= 1.0; }
  std::string describe() const;  // one line with the numbers and "ok" or "FAILED"
};

// linear_forward and linear_backward with T of `dtype` (kF32, kF16 or kBF16). Backward accumulates onto
// random initial gradients, checking the "+=" contract; with_bias = false passes null bias and dbias.
std::vector<Measurement> check_linear(const Context& ctx, DType dtype, int N, int C, int OC, bool with_bias,
                                      uint64_t seed);

// gelu_forward and gelu_backward over n elements.
std::vector<Measurement> check_gelu(const Context& ctx, DType dtype, int64_t n, uint64_t seed);

}  // namespace gpt::cuda
