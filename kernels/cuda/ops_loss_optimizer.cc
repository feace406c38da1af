// CudaOps' cross-entropy, AdamW and the reductions the engine reads back (sum, sum of squares, finiteness),
// and the division of gradients (see cuda_ops.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {

// The reductions go through the host for now: exact, in the CPU backend's order, but a copy of the tensor.
double CudaOps::sum(const Tensor& x) {
  std::vector<float> host(size_t(x.numel()));
  f32(x, "sum");
  download(host.data(), x);
  double total = 0;
  for (float v : host) total += double(v);
  return total;
}

double CudaOps::sum_of_squares(const Tensor& x) {
  std::vector<float> host(size_t(x.numel()));
  f32(x, "sum_of_squares");
  download(host.data(), x);
  // Fixed-size chunks summed in a fixed order, as the CPU backend does.
  constexpr size_t kChunk = 1 << 14;
  double total = 0;
  for (size_t begin = 0; begin < host.size(); begin += kChunk) {
    double chunk = 0;
    for (size_t i = begin; i < std::min(host.size(), begin + kChunk); ++i)
      chunk += double(host[i]) * double(host[i]);
    total += chunk;
  }
  return total;
}

bool CudaOps::all_finite(const Tensor& x) {
  std::vector<float> host(size_t(x.numel()));
  f32(x, "all_finite");
  download(host.data(), x);
  for (float v : host) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

void CudaOps::cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) {
  not_yet("cross_entropy_forward");
}

void CudaOps::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) {
  not_yet("cross_entropy_backward");
}

void CudaOps::adamw(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&, int64_t,
                    float) {
  not_yet("adamw");
}

void CudaOps::divide(const Tensor&, float) {
  not_yet("divide");
}

}  // namespace gpt::cuda
