// The CPU's reference of the layer ops' mixed-precision contract (kernels/ops.h): CpuOps, whose kernels take
// fp32 and fp64 only, taught the contract's fp16/bf16 tensors the plainest way. Each half tensor of a call is
// widened exactly into fp32 host memory, the fp32 op runs, and each output is rounded back to its dtype once
// (round to nearest even), which is what the contract says a half op computes. The CUDA backend's kernels
// keep the same promise with their own summation orders, so the two agree within the half tolerances.
//
// It exists so that what runs on half tensors (the half layer loop, model/loop.h) is tested on a machine
// without a GPU; it is no speed-up. compute_dtype() answers fp16 and bf16 for those precisions, as the CUDA
// backend does, so an engine given this backend computes as the GPU would. The plain CpuOps keeps fp32
// everywhere (gpt_train on the CPU, the golden outputs).
#pragma once

#include "kernels/cpu/cpu_ops.h"
#include "kernels/mixed_precision.h"

namespace gpt {

class MixedPrecisionCpuOps : public CpuOps {
 public:
  DType compute_dtype(DType precision) const override {
    return is_half(precision) ? precision : CpuOps::compute_dtype(precision);
  }
  // Zero fills any float dtype (CUDA: a memset); other values fp32 and fp64 only, as on CUDA.
  void fill(const Tensor& t, double value) override;

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) override;
  void embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte, int64_t first,
                              const Tensor& wpe) override;
  void embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe, const Tensor& dout,
                               const Tensor& tokens) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& w, const Tensor& b) override;
  void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) override;
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                       const Tensor& x, const Tensor& w) override;
  void linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                              const Tensor& b) override;
  void linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                               int64_t first, const Tensor& x, const Tensor& w) override;
  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                         const DropoutMask* dropout) override;
  void attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, const DropoutMask* dropout) override;
  void gelu_forward(const Tensor& out, const Tensor& x) override;
  void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) override;
  void dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) override;
  void cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                             const Tensor& targets, int vocab) override;
  void cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              const Tensor& dlosses, int vocab) override;
  void cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t first,
                           int vocab) override;
  void cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                           const Tensor& stats, int64_t first, int vocab) override;
  void cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                      const Tensor& dlosses, int64_t first, int vocab) override;
};

}  // namespace gpt
