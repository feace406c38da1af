// Helpers shared by the files that implement CudaOps (cuda_ops.cc and the ops_*.cc files, one per family of
// ops): checking a tensor's dtype and taking its typed pointer, with errors that name the op, and the
// mixed-precision contract of the layer ops (kernels/ops.h): the dtype check, the dispatch on the
// activations' dtype, and Widened, which runs an fp32-only kernel on fp16/bf16 tensors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "kernels/mixed_precision.h"
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

// Two tensors an op reads or writes element for element must hold as many elements.
inline void check_same_size(const char* op, const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) {
    throw CudaError(std::string("CudaOps::") + op + ": " + a.describe() + " and " + b.describe() +
                    " differ in size");
  }
}

// The layer ops' dtype contract (kernels/mixed_precision.h) for CudaOps' `op`: returns the activations'
// dtype T.
inline DType check_dtypes(const char* op, std::initializer_list<Named> compute,
                          std::initializer_list<Named> fp32 = {}) {
  return check_mixed_dtypes("CudaOps", op, compute, fp32);
}

// The tensor's data as T (null when empty); check_dtypes has checked the dtype.
template <typename T>
T* typed(const Tensor& t) {
  return t.empty() ? nullptr : static_cast<T*>(t.data);
}

// Calls f.template operator()<T>() with T the storage type of a compute dtype check_dtypes returned.
template <typename F>
void on_compute_dtype(DType dtype, F&& f) {
  if (dtype == DType::kF16) {
    f.template operator()<__half>();
  } else if (dtype == DType::kBF16) {
    f.template operator()<__nv_bfloat16>();
  } else {
    f.template operator()<float>();
  }
}

// Runs a kernel that takes fp32 only on the contract's fp16/bf16 tensors: each half tensor gets fp32 scratch
// (StreamScratch, in stream order), widened exactly before the kernel when it reads the values, and rounded
// back once (round to nearest even, the casts of elementwise.h) by narrow() when the kernel writes them. So a
// half op computes in fp32 and rounds each output once, as a kernel templated on the storage type would. An
// fp32 tensor passes through as its own pointer, so the fp32 path is exactly the kernel on the caller's
// memory. Tensors at one address (an op that may work in place, probs aliasing logits) share one scratch.
class Widened {
 public:
  explicit Widened(const Context& ctx) : ctx_(ctx) {}
  Widened(const Widened&) = delete;
  Widened& operator=(const Widened&) = delete;

  const float* in(const Tensor& t) { return at(t, true, false); }  // read by the kernel
  float* out(const Tensor& t) { return at(t, false, true); }       // overwritten by the kernel
  float* inout(const Tensor& t) { return at(t, true, true); }      // accumulated into by the kernel
  // Enqueues the rounding of every output back into its tensor; call once, after the kernel.
  void narrow();

 private:
  // One half tensor's scratch (freed in stream order, after the kernels that use it).
  struct Entry {
    Tensor tensor;
    std::unique_ptr<StreamScratch> scratch;
    bool widened = false, written = false;
  };
  float* at(const Tensor& t, bool read, bool written);

  const Context& ctx_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace gpt::cuda
