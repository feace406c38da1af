// The dtype rule of the layer ops' mixed-precision contract (kernels/ops.h), shared by the backends that take
// it: the CUDA backend's kernels (kernels/cuda) and the CPU's reference of the contract
// (kernels/cpu/mixed_precision_ops.h).
#pragma once

#include <initializer_list>

#include "tensor/tensor.h"

namespace gpt {

// A tensor of an op's call under the name its dtype error gives it.
struct Named {
  const char* name;
  const Tensor& tensor;
};

// fp16 or bf16: the contract's half dtypes.
inline bool is_half(DType d) {
  return d == DType::kF16 || d == DType::kBF16;
}

// What the contract keeps in fp32 next to fp16/bf16 activations (LayerNorm's statistics and parameter
// gradients, attention's log-sum-exp, the losses and their softmax statistics); next to fp32 or fp64
// activations, their own dtype.
inline DType statistics_dtype(DType activations) {
  return is_half(activations) ? DType::kF32 : activations;
}

// The contract for one call of `backend`'s `op`: the `compute` tensors hold the activations' dtype T (fp32,
// fp16 or bf16; the first non-empty one decides, so list the activation first), the `fp32` ones are fp32
// whatever T is (LayerNorm's statistics, parameter gradients, losses). Empty tensors are absent optional
// arguments. Returns T; any other combination throws UnsupportedOp with one line naming backend::op and every
// tensor's dtype.
DType check_mixed_dtypes(const char* backend, const char* op, std::initializer_list<Named> compute,
                         std::initializer_list<Named> fp32 = {});

}  // namespace gpt
