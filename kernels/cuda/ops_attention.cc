// CudaOps' causal multi-head attention: forward, backward and the one-row decode (see cuda_ops.h). The
// forward and backward run the flash-attention kernels (flash_attention.h): the residual `att` is one
// log-sum-exp per row, [B, NH, T] (cuda_attention_residual() = kLogSumExp), the backward recomputes the
// probabilities from it, qkv and the forward's output; the kernels take the activations' dtype (fp32, fp16
// or bf16; the mixed-precision contract of kernels/ops.h keeps the log-sum-exp in it too) directly. The
// decode keeps attention.cu's fp32 kernel (its att is the one row's probabilities [NH, n]), reached on half
// tensors through Widened (fp32 scratch, each output rounded once). The sizes come from the tensors: att is
// [B, NH, T] (decode: [NH, n]) and C is the last dimension of out (backward: of dout). The older T x T
// kernels of attention.cu stay compiled beside flash (bench and gpu_check time them).
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {
namespace {

// The attention tensors carry their sizes in their shapes; a wrong rank would read garbage sizes.
void require_rank(const Tensor& t, size_t rank, const char* op, const char* name) {
  if (t.shape.size() != rank)
    throw CudaError(std::string("CudaOps::") + op + ": " + name + " must have " + std::to_string(rank) +
                    " dimensions, got " + t.describe());
}

// The flash kernels are compiled for head sizes 64 and 128; another is an op this backend lacks (the op-case
// table reports "not supported"), not a failure of the kernels.
void require_flash_head_size(const char* op, int C, int NH) {
  if (NH > 0 && C % NH == 0 && !flash_head_size_supported(C / NH))
    throw UnsupportedOp(std::string("CudaOps::") + op + ": head size " + std::to_string(C / NH) +
                        " is not supported (the CUDA flash-attention kernels take head sizes 64 and 128)");
}

AttentionDropout to_kernel(const DropoutMask& mask) {
  return AttentionDropout{mask.p, mask.keys, mask.element_offset};
}

}  // namespace

void CudaOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                const DropoutMask* dropout) {
  constexpr const char* kOp = "attention_forward";
  require_rank(att, 3, kOp, "att (the log-sum-exp [B, NH, T])");
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(out.shape.back());
  const AttentionDropout spec = dropout ? to_kernel(*dropout) : AttentionDropout{};
  const DType dtype = check_dtypes(kOp, {{"qkv", qkv}, {"out", out}, {"att", att}});
  require_flash_head_size(kOp, C, NH);
  on_compute_dtype(dtype, [&]<typename Act>() {
    cuda::flash_attention_forward<Act>(context_, typed<Act>(out), typed<Act>(att), typed<const Act>(qkv), B,
                                       T, C, NH, dropout ? &spec : nullptr);
  });
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

// Keeps the log-sum-exp (cuda_attention_residual()); the forward's output gives the rows' dot(dout, out).
void CudaOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& att, const DropoutMask* dropout) {
  constexpr const char* kOp = "attention_backward";
  require_rank(att, 3, kOp, "att (the log-sum-exp [B, NH, T])");
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(dout.shape.back());
  const AttentionDropout spec = dropout ? to_kernel(*dropout) : AttentionDropout{};
  const DType dtype =
      check_dtypes(kOp, {{"qkv", qkv}, {"dout", dout}, {"out", out}, {"att", att}, {"dqkv", dqkv}});
  require_flash_head_size(kOp, C, NH);
  on_compute_dtype(dtype, [&]<typename Act>() {
    cuda::flash_attention_backward<Act>(context_, typed<Act>(dqkv), typed<const Act>(dout),
                                        typed<const Act>(qkv), typed<const Act>(out), typed<const Act>(att),
                                        B, T, C, NH, dropout ? &spec : nullptr);
  });
}

}  // namespace gpt::cuda
