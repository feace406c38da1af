// CudaOps' cross-entropy (whole or vocabulary-parallel), AdamW and the reductions the engine reads back
// (sum, sum of squares, finiteness), and the division of gradients (see cuda_ops.h): shape and dtype checks,
// then the kernels of cross_entropy.cu, adamw.cu and reduce.cu. The cross-entropy ops take the
// mixed-precision contract of kernels/ops.h: logits, probs and dlogits in the activations' dtype (fp32, fp16
// or bf16), losses, dlosses and stats fp32; the kernels are fp32, so half tensors reach them through Widened
// (fp32 scratch, each output rounded once). The reductions, AdamW and division take fp32 only.
#include <cstdint>
#include <string>

#include "kernels/common/adamw_element.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ops_internal.h"
#include "kernels/cuda/reduce.h"

namespace gpt::cuda {
namespace {

[[noreturn]] void bad_arguments(const char* op, const std::string& what) {
  throw CudaError(std::string("CudaOps::") + op + ": " + what);
}

const int32_t* i32(const Tensor& t, const char* op) {
  if (t.dtype != DType::kI32) bad_arguments(op, "expected i32 targets, got " + t.describe());
  return static_cast<const int32_t*>(t.data);
}

// rows x padded vocabulary of logits-like `t`, checked against N rows of targets and `vocab` real columns.
void check_rows(const char* op, const Tensor& t, const Tensor& targets, int vocab) {
  if (t.shape.size() != 2 || targets.numel() != t.shape[0])
    bad_arguments(op, t.describe() + " is not [N, Vp] for targets " + targets.describe());
  if (vocab <= 0 || vocab > t.shape[1])
    bad_arguments(op, "vocab " + std::to_string(vocab) + " outside (0, Vp] for " + t.describe());
}

}  // namespace

double CudaOps::sum(const Tensor& x) {
  return sum_f32(context_, f32(x, "sum"), x.numel());
}

double CudaOps::sum_of_squares(const Tensor& x) {
  return sum_of_squares_f32(context_, f32(x, "sum_of_squares"), x.numel());
}

bool CudaOps::all_finite(const Tensor& x) {
  return all_finite_f32(context_, f32(x, "all_finite"), x.numel());
}

void CudaOps::cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                    const Tensor& targets, int vocab) {
  constexpr const char* kOp = "cross_entropy_forward";
  check_rows(kOp, logits, targets, vocab);
  check_same_size(kOp, probs, logits);
  check_same_size(kOp, losses, targets);
  check_dtypes(kOp, {{"logits", logits}, {"probs", probs}}, {{"losses", losses}});
  Widened wide(context_);  // probs may alias logits: they then share one scratch
  const float* plogits = wide.in(logits);
  cross_entropy_forward_f32(context_, typed<float>(losses), wide.out(probs), plogits, i32(targets, kOp),
                            int(logits.shape[0]), vocab, int(logits.shape[1]));
  wide.narrow();
}

void CudaOps::cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                     const Tensor& dlosses, int vocab) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_rows(kOp, probs, targets, vocab);
  check_same_size(kOp, dlogits, probs);
  check_same_size(kOp, dlosses, targets);
  check_dtypes(kOp, {{"probs", probs}, {"dlogits", dlogits}}, {{"dlosses", dlosses}});
  Widened wide(context_);  // dlogits may alias probs
  const float* pprobs = wide.in(probs);
  cross_entropy_backward_f32(context_, wide.out(dlogits), pprobs, i32(targets, kOp), typed<float>(dlosses),
                             int(probs.shape[0]), vocab, int(probs.shape[1]));
  wide.narrow();
}

namespace {

// A vocabulary-parallel slice [N, W] with its targets [N] (and first >= 0, vocab > 0). Returns N.
int64_t check_columns(const char* op, const Tensor& t, const Tensor& targets, int64_t first, int vocab) {
  if (t.shape.size() != 2 || targets.numel() != t.shape[0] || t.shape[0] > INT32_MAX ||
      t.shape[1] > INT32_MAX)
    bad_arguments(op, t.describe() + " is not [N, W] for targets " + targets.describe());
  if (first < 0 || vocab <= 0)
    bad_arguments(op, "columns from " + std::to_string(first) + " of vocabulary " + std::to_string(vocab) +
                          " (want first >= 0, vocab > 0)");
  return t.shape[0];
}

}  // namespace

void CudaOps::cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets,
                                  int64_t first, int vocab) {
  constexpr const char* kOp = "cross_entropy_stats";
  const int64_t N = check_columns(kOp, logits, targets, first, vocab);
  if (stats.numel() != 3 * N) bad_arguments(kOp, "stats " + stats.describe() + " is not [N, 3]");
  check_dtypes(kOp, {{"logits", logits}}, {{"stats", stats}});
  Widened wide(context_);
  cross_entropy_stats_f32(context_, typed<float>(stats), wide.in(logits), i32(targets, kOp), int(N),
                          int(logits.shape[1]), first, vocab);
}

void CudaOps::cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                  const Tensor& stats, int64_t first, int vocab) {
  constexpr const char* kOp = "cross_entropy_merge";
  if (logits.shape.size() != 2 || logits.shape[0] <= 0 || logits.shape[1] > INT32_MAX)
    bad_arguments(kOp, "logits " + logits.describe() + " is not [N, W]");
  const int64_t N = logits.shape[0];
  if (stats.numel() == 0 || stats.numel() % (3 * N) != 0)
    bad_arguments(kOp, "stats " + stats.describe() + " is not [G, N, 3] for " + logits.describe());
  if (first < 0 || vocab <= 0)
    bad_arguments(kOp, "columns from " + std::to_string(first) + " of vocabulary " + std::to_string(vocab));
  check_same_size(kOp, probs, logits);
  if (losses.numel() != N) bad_arguments(kOp, "losses " + losses.describe() + " is not [N]");
  check_dtypes(kOp, {{"logits", logits}, {"probs", probs}}, {{"losses", losses}, {"stats", stats}});
  Widened wide(context_);  // probs may alias logits
  const float* plogits = wide.in(logits);
  cross_entropy_merge_f32(context_, typed<float>(losses), wide.out(probs), plogits, typed<float>(stats),
                          int(stats.numel() / (3 * N)), int(N), int(logits.shape[1]), first, vocab);
  wide.narrow();
}

void CudaOps::cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs,
                                             const Tensor& targets, const Tensor& dlosses, int64_t first,
                                             int vocab) {
  constexpr const char* kOp = "cross_entropy_backward_columns";
  const int64_t N = check_columns(kOp, probs, targets, first, vocab);
  check_same_size(kOp, dlogits, probs);
  check_same_size(kOp, dlosses, targets);
  check_dtypes(kOp, {{"probs", probs}, {"dlogits", dlogits}}, {{"dlosses", dlosses}});
  Widened wide(context_);  // dlogits may alias probs
  const float* pprobs = wide.in(probs);
  cross_entropy_backward_columns_f32(context_, wide.out(dlogits), pprobs, i32(targets, kOp),
                                     typed<float>(dlosses), int(N), int(probs.shape[1]), first, vocab);
  wide.narrow();
}

void CudaOps::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const AdamWHyper& hyper, int64_t step, float grad_scale) {
  constexpr const char* kOp = "adamw";
  check_same_size(kOp, param, grad);
  check_same_size(kOp, param, m);
  check_same_size(kOp, param, v);
  // The CPU's constants exactly: bias corrections in double, folded into fp32 (adamw_element.h).
  const gpt::adamw::Constants<float> constants = gpt::adamw::constants(hyper, step, grad_scale);
  adamw_f32(context_, f32(param, kOp), f32(grad, kOp), f32(m, kOp), f32(v, kOp), param.numel(), constants,
            hyper.decoupled);
}

void CudaOps::adamw_with_copy(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                              const AdamWHyper& hyper, int64_t step, float grad_scale,
                              const Tensor& compute) {
  constexpr const char* kOp = "adamw_with_copy";
  if (!is_half(compute.dtype))
    return Ops::adamw_with_copy(param, grad, m, v, hyper, step, grad_scale, compute);
  check_same_size(kOp, param, grad);
  check_same_size(kOp, param, m);
  check_same_size(kOp, param, v);
  check_same_size(kOp, param, compute);
  const gpt::adamw::Constants<float> constants = gpt::adamw::constants(hyper, step, grad_scale);
  adamw_f32_with_copy(context_, f32(param, kOp), f32(grad, kOp), f32(m, kOp), f32(v, kOp), param.numel(),
                      constants, hyper.decoupled, bits16(compute), compute.dtype);
}

void CudaOps::divide(const Tensor& x, float divisor) {
  divide_f32(context_, f32(x, "divide"), divisor, x.numel());
}

}  // namespace gpt::cuda
