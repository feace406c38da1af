// A CPU backend that keeps attention's log-sum-exp instead of its probabilities, as the CUDA backend's flash
// kernels do (Ops::attention_residual = kLogSumExp): CpuOps with attention_forward and _backward from
// kernels/cpu/flash_attention.h. It drives the layer loop's log-sum-exp path on the CPU (the residual's
// [B,NH,T] shape, the forward's output handed to the backward, the activation count), against the default
// CPU backend that keeps the probabilities, and it is the op-case table's reference for a backend that keeps
// the log-sum-exp (kernels/cases/run_case.cc).
#pragma once

#include <stdexcept>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_attention.h"

namespace gpt {

class FlashCpuOps final : public CpuOps {
 public:
  AttentionResidual attention_residual() const override { return AttentionResidual::kLogSumExp; }

  // lse [B,NH,T] is the residual: one log-sum-exp per row.
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                         const DropoutMask* dropout) override {
    const Sizes s = sizes(lse, out);
    const cpu::AttentionDropout spec = kernel_dropout(dropout);
    if (qkv.dtype == DType::kF64) {
      cpu::flash_attention_forward(out.as<double>(), lse.as<double>(), qkv.as<const double>(), s.B, s.T, s.C,
                                   s.NH, dropout ? &spec : nullptr);
    } else {
      cpu::flash_attention_forward(out.as<float>(), lse.as<float>(), qkv.as<const float>(), s.B, s.T, s.C,
                                   s.NH, dropout ? &spec : nullptr);
    }
  }

  // The flash backward reads the forward's output (rowsum(dout * out)) and its log-sum-exp.
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const DropoutMask* dropout) override {
    const Sizes s = sizes(lse, out);
    const cpu::AttentionDropout spec = kernel_dropout(dropout);
    fill(dqkv, 0);  // the kernel accumulates; the op overwrites
    if (qkv.dtype == DType::kF64) {
      cpu::flash_attention_backward(dqkv.as<double>(), dout.as<const double>(), qkv.as<const double>(),
                                    out.as<const double>(), lse.as<const double>(), s.B, s.T, s.C, s.NH,
                                    dropout ? &spec : nullptr);
    } else {
      cpu::flash_attention_backward(dqkv.as<float>(), dout.as<const float>(), qkv.as<const float>(),
                                    out.as<const float>(), lse.as<const float>(), s.B, s.T, s.C, s.NH,
                                    dropout ? &spec : nullptr);
    }
  }

 private:
  struct Sizes {
    int B, NH, T, C;
  };
  // From the residual [B,NH,T] and the output [B,T,C]; a [B,NH,T,T] residual means the loop allocated by
  // another backend's answer.
  static Sizes sizes(const Tensor& lse, const Tensor& out) {
    if (lse.shape.size() != 3 || out.shape.empty())
      throw std::invalid_argument("FlashCpuOps: expected lse [B,NH,T], got " + lse.describe());
    return {int(lse.shape[0]), int(lse.shape[1]), int(lse.shape[2]), int(out.shape.back())};
  }
  static cpu::AttentionDropout kernel_dropout(const DropoutMask* mask) {
    return mask ? cpu::AttentionDropout{mask->p, mask->keys, mask->element_offset} : cpu::AttentionDropout{};
  }
};

}  // namespace gpt
