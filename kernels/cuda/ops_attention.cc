// CudaOps' causal multi-head attention: forward, backward and the one-row decode (see cuda_ops.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {

void CudaOps::attention_forward(const Tensor&, const Tensor&, const Tensor&, const DropoutMask*) {
  not_yet("attention_forward");
}

void CudaOps::attention_decode(const Tensor&, const Tensor&, const Tensor&) {
  not_yet("attention_decode");
}

void CudaOps::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const DropoutMask*) {
  not_yet("attention_backward");
}

}  // namespace gpt::cuda
