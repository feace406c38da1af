// CudaOps' fused classifier (Ops::classifier_forward / _backward): per chunk of rows, the logits GEMM into
// the chunk scratch (cuBLASLt, linear.h), then one kernel pass (classifier.h) that reads each row for its
// softmax statistics and writes the losses, and in the backward the dlogits in place of the logits, then the
// two backward GEMMs. The probabilities are never stored, so a chunk costs one GEMM, one kernel over its
// logits and (backward) two GEMMs, instead of the unfused head's extra pass to write and read probs.
// In the mixed-precision contract (the half layer loop: lnf, wte, dlnf and the scratch in fp16/bf16; losses,
// dlosses and dwte fp32) lnf and wte are widened into fp32 scratch once a call and the chunks' logits held
// in fp32 (Widened, ops_internal.h): the same fp32 kernels, whose GEMMs round their inputs back to the half
// dtype on the tensor cores when set_matmul_inputs asks (gpt_train does at --bf16/--fp16), so the widening
// costs a pass over wte and no precision.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda/classifier.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {
namespace {

const int32_t* targets_of(const Tensor& t, const char* op) {
  if (t.dtype != DType::kI32)
    throw std::invalid_argument(std::string("CudaOps::") + op + ": targets must be i32, got " + t.describe());
  return static_cast<const int32_t*>(t.data);
}

// The chunk's logits in fp32: the scratch itself, or fp32 stream scratch of its size beside half
// activations (then `own` holds it).
float* fp32_logits(const Context& ctx, const Tensor& scratch, std::unique_ptr<StreamScratch>& own) {
  if (scratch.dtype == DType::kF32) return static_cast<float*>(scratch.data);
  own = std::make_unique<StreamScratch>(ctx, size_t(scratch.numel()) * sizeof(float));
  return own->as<float>();
}

}  // namespace

void CudaOps::classifier_forward(const Tensor& losses, const Tensor& lnf, const Tensor& wte,
                                 const Tensor& targets, int vocab, const Tensor& scratch) {
  constexpr const char* kOp = "classifier_forward";
  const ClassifierShape s = classifier_shape(kOp, lnf, wte, targets, losses, vocab, scratch);
  check_dtypes(kOp, {{"lnf", lnf}, {"wte", wte}, {"scratch", scratch}}, {{"losses", losses}});
  Widened wide(context_);
  const float *x = wide.in(lnf), *w = wide.in(wte);
  std::unique_ptr<StreamScratch> own;
  float *logits = fp32_logits(context_, scratch, own), *out = f32(losses, kOp);
  const int32_t* y = targets_of(targets, kOp);
  for (int64_t first = 0; first < s.N; first += s.R) {
    const int rows = int(std::min(s.R, s.N - first));
    cuda::linear_forward<float>(context_, logits, x + first * s.C, w, nullptr, rows, int(s.C), int(s.Vp));
    classifier_losses_f32(context_, out + first, logits, y + first, rows, vocab, int(s.Vp));
  }
}

void CudaOps::classifier_backward(const Tensor& dlnf, const Tensor& dwte, const Tensor& losses,
                                  const Tensor& lnf, const Tensor& wte, const Tensor& targets,
                                  const Tensor& dlosses, int vocab, const Tensor& scratch) {
  constexpr const char* kOp = "classifier_backward";
  const ClassifierShape s = classifier_shape(kOp, lnf, wte, targets, dlosses, vocab, scratch);
  if (losses.numel() != s.N || dlnf.numel() != lnf.numel() || dwte.numel() != wte.numel())
    throw std::invalid_argument("CudaOps::classifier_backward: losses, dlnf or dwte of the wrong size");
  check_dtypes(kOp, {{"lnf", lnf}, {"wte", wte}, {"dlnf", dlnf}, {"scratch", scratch}},
               {{"losses", losses}, {"dlosses", dlosses}, {"dwte", dwte}});
  Widened wide(context_);
  const float *x = wide.in(lnf), *w = wide.in(wte), *dl = f32(dlosses, kOp);
  float* dx = wide.out(dlnf);
  std::unique_ptr<StreamScratch> own;
  float *logits = fp32_logits(context_, scratch, own), *out = f32(losses, kOp), *dw = f32(dwte, kOp);
  const int32_t* y = targets_of(targets, kOp);
  const int C = int(s.C), Vp = int(s.Vp);
  for (int64_t first = 0; first < s.N; first += s.R) {
    const int rows = int(std::min(s.R, s.N - first));
    cuda::linear_forward<float>(context_, logits, x + first * C, w, nullptr, rows, C, Vp);
    classifier_dlogits_f32(context_, out + first, logits, y + first, dl + first, rows, vocab, Vp);
    // dlnf[chunk] = dlogits wte; dwte += dlogits^T lnf[chunk].
    cuda::linear_backward<float>(context_, dx + first * C, dw, nullptr, logits, x + first * C, w, rows, C,
                                 Vp);
  }
  wide.narrow();  // dlnf, when half
}

}  // namespace gpt::cuda
