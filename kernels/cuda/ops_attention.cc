// CudaOps' causal multi-head attention: forward, backward and the one-row decode (see cuda_ops.h), on the
// kernels of attention.cu. qkv, out, att, dout and dqkv share the activations' dtype (fp32, fp16 or bf16; the
// mixed-precision contract of kernels/ops.h); the kernels are fp32, so half tensors reach them through
// Widened (fp32 scratch, each output rounded once: att is kept in the compute dtype). The sizes come from the
// tensors exactly as CpuOps reads them: att is [B, NH, T, T] (decode: [NH, n]) and C is the last dimension of
// out (backward: of dout).
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {
namespace {

// The attention tensors carry their sizes in their shapes; a wrong rank would read garbage sizes.
void require_rank(const Tensor& t, size_t rank, const char* op, const char* name) {
  if (t.shape.size() != rank)
    throw CudaError(std::string("CudaOps::") + op + ": " + name + " must have " + std::to_string(rank) +
                    " dimensions, got " + t.describe());
}

AttentionDropout to_kernel(const DropoutMask& mask) {
  return AttentionDropout{mask.p, mask.keys, mask.element_offset};
}

}  // namespace

void CudaOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                const DropoutMask* dropout) {
  constexpr const char* kOp = "attention_forward";
  require_rank(att, 4, kOp, "att");
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(out.shape.back());
  const AttentionDropout spec = dropout ? to_kernel(*dropout) : AttentionDropout{};
  check_dtypes(kOp, {{"qkv", qkv}, {"out", out}, {"att", att}});
  Widened wide(context_);
  const float* pqkv = wide.in(qkv);
  cuda::attention_forward(context_, wide.out(out), wide.out(att), pqkv, B, T, C, NH,
                          dropout ? &spec : nullptr);
  wide.narrow();
}

void CudaOps::attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) {
  constexpr const char* kOp = "attention_decode";
  require_rank(att, 2, kOp, "att");
  const int NH = int(att.shape[0]), n = int(att.shape[1]), C = int(out.shape.back());
  check_dtypes(kOp, {{"qkv", qkv}, {"out", out}, {"att", att}});
  Widened wide(context_);
  const float* pqkv = wide.in(qkv);
  cuda::attention_decode(context_, wide.out(out), wide.out(att), pqkv, n, C, NH);
  wide.narrow();
}

// Keeps the probabilities (cuda_attention_residual()), so the forward's output is not needed.
void CudaOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor&,
                                 const Tensor& att, const DropoutMask* dropout) {
  constexpr const char* kOp = "attention_backward";
  require_rank(att, 4, kOp, "att");
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(dout.shape.back());
  const AttentionDropout spec = dropout ? to_kernel(*dropout) : AttentionDropout{};
  check_dtypes(kOp, {{"qkv", qkv}, {"dout", dout}, {"att", att}, {"dqkv", dqkv}});
  Widened wide(context_);
  const float* pdout = wide.in(dout);
  const float* pqkv = wide.in(qkv);
  const float* patt = wide.in(att);
  cuda::attention_backward(context_, wide.inout(dqkv), pdout, pqkv, patt, B, T, C, NH,
                           dropout ? &spec : nullptr);
  wide.narrow();
}

}  // namespace gpt::cuda
