// Helpers shared by the files that implement CudaOps (cuda_ops.cc and the ops_*.cc files, one per family of
// ops): checking a tensor's dtype and taking its typed pointer, with errors that name the op.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/runtime.h"
#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace gpt::cuda {

inline float* f32(const Tensor& t, const char* op) {
  if (t.dtype != DType::kF32)
    throw UnsupportedOp(std::string("CudaOps::") + op + ": expected f32, got " + t.describe());
  return static_cast<float*>(t.data);
}

inline uint16_t* bits16(const Tensor& t) {
  return static_cast<uint16_t*>(t.data);
}

}  // namespace gpt::cuda
