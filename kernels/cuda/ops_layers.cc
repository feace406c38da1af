// CudaOps' token and position embedding (whole or vocabulary-parallel), LayerNorm, dropout and the tiles of a
// linear layer (see cuda_ops.h): fp32 only, shapes read as CpuOps reads them (kernels/cpu/cpu_ops.cc), the
// kernels in embedding.cu, layernorm.cu, dropout.cu and linear.cu.
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {
namespace {

const int32_t* i32(const Tensor& t, const char* op) {
  if (t.dtype != DType::kI32)
    throw CudaError(std::string("CudaOps::") + op + ": expected i32 tokens, got " + t.describe());
  return static_cast<const int32_t*>(t.data);
}

// An optional fp32 argument: null when the tensor is empty.
float* optional_f32(const Tensor& t, const char* op) {
  return t.empty() ? nullptr : f32(t, op);
}

// t.numel() / parts: elements per row of `parts` rows, or rows of `parts` elements (0 when parts is 0).
int64_t numel_over(const Tensor& t, int64_t parts) {
  return parts > 0 ? t.numel() / parts : 0;
}

const uint64_t* dropout_keys(const DropoutMask& mask, const char* op) {
  if (mask.p > 0 && mask.keys == nullptr)
    throw CudaError(std::string("CudaOps::") + op + ": dropout p > 0 without keys");
  return mask.keys;
}

}  // namespace

void CudaOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                const Tensor& wpe) {
  const char* op = "embedding_forward";
  cuda::embedding_forward(context_, f32(out, op), i32(tokens, op), f32(wte, op), f32(wpe, op),
                          int(out.shape[0]), int(out.shape[1]), int(out.shape[2]));
}

void CudaOps::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                 const Tensor& tokens) {
  const char* op = "embedding_backward";
  const int vocab = dwte.empty() ? 0 : int(dwte.shape[0]);
  cuda::embedding_backward(context_, optional_f32(dwte, op), optional_f32(dwpe, op), f32(dout, op),
                           i32(tokens, op), int(dout.shape[0]), int(dout.shape[1]), int(dout.shape[2]),
                           vocab);
}

namespace {

// A vocabulary-parallel embedding's shapes (as CpuOps checks them): activations [B, T, C], tokens [B, T], the
// table's slice [R, C] (or empty), wpe [maxT >= T, C] or empty. Returns R.
int64_t check_embedding_rows(const char* op, const Tensor& activations, const Tensor& tokens,
                             const Tensor& slice, int64_t first, const Tensor& wpe) {
  const bool ok3 = activations.shape.size() == 3;
  const int64_t T = ok3 ? activations.shape[1] : 0, C = ok3 ? activations.shape[2] : 0;
  const int64_t R = numel_over(slice, C);
  const bool ok = ok3 && C > 0 && tokens.numel() * C == activations.numel() && first >= 0 &&
                  R * C == slice.numel() && R < INT32_MAX && (wpe.empty() || numel_over(wpe, C) >= T);
  if (!ok)
    throw CudaError(std::string("CudaOps::") + op + ": rows from " + std::to_string(first) + " with " +
                    activations.describe() + ", tokens " + tokens.describe() + ", wte " + slice.describe() +
                    ", wpe " + wpe.describe() +
                    " (want [B, T, C], [B, T], [R, C], [maxT >= T, C] or empty, first >= 0)");
  return R;
}

}  // namespace

void CudaOps::embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                     int64_t first, const Tensor& wpe) {
  const char* op = "embedding_forward_rows";
  const int64_t R = check_embedding_rows(op, out, tokens, wte, first, wpe);
  cuda::embedding_forward_rows(context_, f32(out, op), i32(tokens, op), optional_f32(wte, op), first, R,
                               optional_f32(wpe, op), int(out.shape[0]), int(out.shape[1]),
                               int(out.shape[2]));
}

void CudaOps::embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe,
                                      const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_backward_rows";
  const int64_t R = check_embedding_rows(op, dout, tokens, dwte, first, dwpe);
  cuda::embedding_backward_rows(context_, optional_f32(dwte, op), first, R, optional_f32(dwpe, op),
                                f32(dout, op), i32(tokens, op), int(dout.shape[0]), int(dout.shape[1]),
                                int(dout.shape[2]));
}

void CudaOps::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                const Tensor& w, const Tensor& b) {
  const char* op = "layernorm_forward";
  const int64_t C = w.numel();
  cuda::layernorm_forward(context_, f32(out, op), optional_f32(mean, op), optional_f32(rstd, op), f32(x, op),
                          f32(w, op), f32(b, op), int(numel_over(x, C)), int(C));
}

void CudaOps::layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                 const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const int64_t C = w.numel();
  cuda::layernorm_backward(context_, f32(dx, op), f32(dw, op), f32(db, op), f32(dout, op), f32(x, op),
                           f32(w, op), f32(mean, op), f32(rstd, op), int(numel_over(x, C)), int(C));
}

namespace {

// A tile's shapes (see Ops::linear_forward_columns): the tile's w [W, IC], the whole layer's [N, OC].
void check_tile(const char* op, const Tensor& whole, int64_t first, const Tensor& x, const Tensor& w) {
  const bool ok = w.shape.size() == 2 && w.shape[1] > 0 && !whole.shape.empty() && first >= 0 &&
                  first + w.shape[0] <= whole.shape.back() &&
                  numel_over(x, w.shape[1]) * whole.shape.back() == whole.numel();
  if (!ok)
    throw CudaError(std::string("CudaOps::") + op + ": columns from " + std::to_string(first) + " of " +
                    whole.describe() + " with x " + x.describe() + " and w " + w.describe() +
                    " (want w [W, IC], x [N, IC], the whole layer [N, OC], first + W <= OC)");
}

}  // namespace

void CudaOps::linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                                     const Tensor& b) {
  const char* op = "linear_forward_columns";
  check_tile(op, out, first, x, w);
  const int64_t W = w.shape[0], IC = w.shape[1];
  cuda::linear_forward_columns<float>(context_, f32(out, op), f32(x, op), f32(w, op), optional_f32(b, op),
                                      int(numel_over(x, IC)), int(IC), int(out.shape.back()), int(first),
                                      int(W));
}

void CudaOps::linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                      const Tensor& dout, int64_t first, const Tensor& x, const Tensor& w) {
  const char* op = "linear_backward_columns";
  check_tile(op, dout, first, x, w);
  const int64_t W = w.shape[0], IC = w.shape[1];
  cuda::linear_backward_columns<float>(context_, optional_f32(dx, op), f32(dw, op), optional_f32(db, op),
                                       f32(dout, op), f32(x, op), f32(w, op), int(numel_over(x, IC)), int(IC),
                                       int(dout.shape.back()), int(first), int(W));
}

void CudaOps::dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) {
  const char* op = "dropout_forward";
  const int B = int(x.shape[0]);
  apply_dropout(context_, f32(out, op), f32(x, op), dropout_keys(mask, op), mask.p, B, numel_over(x, B),
                mask.element_offset);
}

void CudaOps::dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) {
  const char* op = "dropout_backward";
  const int B = int(dout.shape[0]);
  apply_dropout(context_, f32(dx, op), f32(dout, op), dropout_keys(mask, op), mask.p, B, numel_over(dout, B),
                mask.element_offset);
}

}  // namespace gpt::cuda
