// CudaOps' causal multi-head attention: forward, backward and the one-row decode (see cuda_ops.h). The
// forward and backward run the flash-attention kernels (flash_attention.h): the residual `att` is one
// log-sum-exp per row, [B, NH, T] (cuda_attention_residual() = kLogSumExp), the backward recomputes the
// probabilities from it, qkv and the forward's output; the kernels take the activations' dtype (fp32, fp16
// or bf16) directly, and the log-sum-exp in fp32 (the mixed-precision contract of kernels/ops.h). The
// decode keeps attention.cu's fp32 kernel (its att is the one row's probabilities [NH, n]), reached on half
// tensors through Widened (fp32 scratch, each output rounded once). The sizes come from the tensors: att is
// [B, NH, T] (decode: [NH, n]) and C is the last dimension of out (backward: of dout). The older T x T
// kernels of attention.cu stay compiled beside flash (bench and gpu_check time them). With fp32 activations
// and GEMM inputs rounded to bf16 or fp16 (set_matmul_inputs: --bf16/--fp16 while the layer loop is fp32),
// attention runs the half flash kernels on rounded copies (HalfCopies) instead of the exact fp32 path, which
// on an H200 took 5.5 ms a layer forward and backward at B = 8, T = 1024 against 2.1 in bf16.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise.h"
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

// The half type whose tensor-core kernels fp32 attention may run on: the GEMMs' (set_matmul_inputs, so
// --bf16/--fp16 with fp32 activations), or none (exact fp32).
DType rounded_dtype(const Context& ctx) {
  switch (ctx.fp32_gemm_compute()) {
    case CUBLAS_COMPUTE_32F_FAST_16BF:
      return DType::kBF16;
    case CUBLAS_COMPUTE_32F_FAST_16F:
      return DType::kF16;
    default:
      return DType::kF32;
  }
}

// fp32 tensors as half copies in stream-ordered scratch: attention's QK^T and PV then run on the tensor
// cores, as the GEMMs do when set_matmul_inputs rounds their inputs. Unlike a GEMM's, the kernel's outputs
// (out, dqkv) come back rounded to the half type too: widened exactly, each rounded once (the log-sum-exp is
// fp32 either way).
class HalfCopies {
 public:
  HalfCopies(const Context& ctx, DType half) : ctx_(ctx), half_(half) {}

  // A copy of t rounded to the half type (round to nearest even).
  uint16_t* rounded(const Tensor& t) {
    uint16_t* h = scratch(t.numel());
    if (half_ == DType::kBF16) {
      f32_to_bf16_scaled(ctx_, h, static_cast<const float*>(t.data), 1.0f, t.numel());
    } else {
      f32_to_f16_scaled(ctx_, h, static_cast<const float*>(t.data), 1.0f, t.numel());
    }
    return h;
  }
  // Uninitialized half scratch of n elements.
  uint16_t* scratch(int64_t n) {
    parts_.push_back(std::make_unique<StreamScratch>(ctx_, size_t(n) * sizeof(uint16_t)));
    return parts_.back()->as<uint16_t>();
  }
  // dst = the half values of h, widened exactly.
  void widen(float* dst, const uint16_t* h, int64_t n) {
    if (half_ == DType::kBF16) {
      bf16_to_f32(ctx_, dst, h, n);
    } else {
      f16_to_f32(ctx_, dst, h, n);
    }
  }
  // Calls f.template operator()<H>() with H the half storage type.
  template <typename F>
  void on_half(F&& f) const {
    on_compute_dtype(half_, std::forward<F>(f));
  }

 private:
  const Context& ctx_;
  DType half_;
  std::vector<std::unique_ptr<StreamScratch>> parts_;
};

}  // namespace

void CudaOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                const DropoutMask* dropout) {
  constexpr const char* kOp = "attention_forward";
  require_rank(att, 3, kOp, "att (the log-sum-exp [B, NH, T])");
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(out.shape.back());
  const AttentionDropout spec = dropout ? to_kernel(*dropout) : AttentionDropout{};
  const DType dtype = check_dtypes(kOp, {{"qkv", qkv}, {"out", out}}, {{"att", att}});
  require_flash_head_size(kOp, C, NH);
  float* lse = f32(att, kOp);
  if (dtype == DType::kF32 && rounded_dtype(context_) != DType::kF32) {
    HalfCopies half(context_, rounded_dtype(context_));
    const uint16_t* hqkv = half.rounded(qkv);
    uint16_t* hout = half.scratch(out.numel());
    half.on_half([&]<typename H>() {
      cuda::flash_attention_forward<H>(context_, reinterpret_cast<H*>(hout), lse,
                                       reinterpret_cast<const H*>(hqkv), B, T, C, NH,
                                       dropout ? &spec : nullptr);
    });
    half.widen(static_cast<float*>(out.data), hout, out.numel());
    return;
  }
  on_compute_dtype(dtype, [&]<typename Act>() {
    cuda::flash_attention_forward<Act>(context_, typed<Act>(out), lse, typed<const Act>(qkv), B, T, C, NH,
                                       dropout ? &spec : nullptr);
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
      check_dtypes(kOp, {{"qkv", qkv}, {"dout", dout}, {"out", out}, {"dqkv", dqkv}}, {{"att", att}});
  require_flash_head_size(kOp, C, NH);
  const float* lse = f32(att, kOp);
  if (dtype == DType::kF32 && rounded_dtype(context_) != DType::kF32) {
    // out came back from the half forward, so it rounds back to exactly what that wrote.
    HalfCopies half(context_, rounded_dtype(context_));
    const uint16_t *hdout = half.rounded(dout), *hqkv = half.rounded(qkv), *hout = half.rounded(out);
    uint16_t* hdqkv = half.scratch(dqkv.numel());
    half.on_half([&]<typename H>() {
      cuda::flash_attention_backward<H>(context_, reinterpret_cast<H*>(hdqkv),
                                        reinterpret_cast<const H*>(hdout), reinterpret_cast<const H*>(hqkv),
                                        reinterpret_cast<const H*>(hout), lse, B, T, C, NH,
                                        dropout ? &spec : nullptr);
    });
    half.widen(static_cast<float*>(dqkv.data), hdqkv, dqkv.numel());
    return;
  }
  on_compute_dtype(dtype, [&]<typename Act>() {
    cuda::flash_attention_backward<Act>(context_, typed<Act>(dqkv), typed<const Act>(dout),
                                        typed<const Act>(qkv), typed<const Act>(out), lse, B, T, C, NH,
                                        dropout ? &spec : nullptr);
  });
}

}  // namespace gpt::cuda
