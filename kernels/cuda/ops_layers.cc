// CudaOps' token and position embedding (whole or vocabulary-parallel), LayerNorm, dropout and the tiles of a
// linear layer (see cuda_ops.h), on the mixed-precision contract of kernels/ops.h: shapes read as CpuOps
// reads them (kernels/cpu/cpu_ops.cc), the kernels in embedding.cu, layernorm.cu, dropout.cu and linear.cu.
// The linear tiles, dropout, LayerNorm and the embedding (whole or vocabulary-parallel, forward and backward)
// dispatch to kernels templated on the storage type: fp32 math, each output rounded once.
#include <cstdint>
#include <string>
#include <type_traits>

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
  const DType dtype = check_dtypes(op, {{"out", out}, {"wte", wte}, {"wpe", wpe}});
  on_compute_dtype(dtype, [&]<typename T>() {  // never a widened copy of the whole table
    cuda::embedding_forward<T>(context_, typed<T>(out), i32(tokens, op), typed<T>(wte), typed<T>(wpe),
                               int(out.shape[0]), int(out.shape[1]), int(out.shape[2]));
  });
}

void CudaOps::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                 const Tensor& tokens) {
  const char* op = "embedding_backward";
  check_dtypes(op, {{"dout", dout}}, {{"dwte", dwte}, {"dwpe", dwpe}});
  const int vocab = dwte.empty() ? 0 : int(dwte.shape[0]);
  on_compute_dtype(dout.dtype, [&]<typename D>() {  // the gradients are fp32, dout in its storage type
    cuda::embedding_backward<D>(context_, typed<float>(dwte), typed<float>(dwpe), typed<D>(dout),
                                i32(tokens, op), int(dout.shape[0]), int(dout.shape[1]), int(dout.shape[2]),
                                vocab);
  });
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
  const DType dtype = check_dtypes(op, {{"out", out}, {"wte", wte}, {"wpe", wpe}});
  const int64_t R = check_embedding_rows(op, out, tokens, wte, first, wpe);
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::embedding_forward_rows<T>(context_, typed<T>(out), i32(tokens, op), typed<T>(wte), first, R,
                                    typed<T>(wpe), int(out.shape[0]), int(out.shape[1]), int(out.shape[2]));
  });
}

void CudaOps::embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe,
                                      const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_backward_rows";
  check_dtypes(op, {{"dout", dout}}, {{"dwte", dwte}, {"dwpe", dwpe}});
  const int64_t R = check_embedding_rows(op, dout, tokens, dwte, first, dwpe);
  on_compute_dtype(dout.dtype, [&]<typename D>() {
    cuda::embedding_backward_rows<D>(context_, typed<float>(dwte), first, R, typed<float>(dwpe),
                                     typed<D>(dout), i32(tokens, op), int(dout.shape[0]), int(dout.shape[1]),
                                     int(dout.shape[2]));
  });
}

void CudaOps::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                const Tensor& w, const Tensor& b) {
  const char* op = "layernorm_forward";
  const DType dtype =
      check_dtypes(op, {{"x", x}, {"w", w}, {"b", b}, {"out", out}}, {{"mean", mean}, {"rstd", rstd}});
  const int64_t C = w.numel();
  const int N = int(numel_over(x, C));
  on_compute_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float>) {  // the vectorized fp32 kernel
      cuda::layernorm_forward(context_, typed<float>(out), typed<float>(mean), typed<float>(rstd),
                              typed<float>(x), typed<float>(w), typed<float>(b), N, int(C));
    } else {
      cuda::layernorm_forward_half<T>(context_, typed<T>(out), typed<float>(mean), typed<float>(rstd),
                                      typed<T>(x), typed<T>(w), typed<T>(b), N, int(C));
    }
  });
}

void CudaOps::residual_layernorm_forward(const Tensor& residual, const Tensor& out, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& a, const Tensor& b,
                                         const Tensor& w, const Tensor& bias) {
  const char* op = "residual_layernorm_forward";
  const DType dtype =
      check_dtypes(op, {{"a", a}, {"b", b}, {"w", w}, {"bias", bias}, {"residual", residual}, {"out", out}},
                   {{"mean", mean}, {"rstd", rstd}});
  check_same_size(op, a, b);
  check_same_size(op, a, residual);
  check_same_size(op, a, out);
  const int64_t C = w.numel();
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::residual_layernorm_forward<T>(context_, typed<T>(residual), typed<T>(out), typed<float>(mean),
                                        typed<float>(rstd), typed<T>(a), typed<T>(b), typed<T>(w),
                                        typed<T>(bias), int(numel_over(a, C)), int(C));
  });
}

void CudaOps::layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                 const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const DType dtype = check_dtypes(op, {{"x", x}, {"w", w}, {"dout", dout}, {"dx", dx}},
                                   {{"dw", dw}, {"db", db}, {"mean", mean}, {"rstd", rstd}});
  const int64_t C = w.numel();
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::layernorm_backward<T>(context_, typed<T>(dx), typed<float>(dw), typed<float>(db), typed<T>(dout),
                                typed<T>(x), typed<T>(w), typed<float>(mean), typed<float>(rstd),
                                int(numel_over(x, C)), int(C));
  });
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
  const DType dtype = check_dtypes(op, {{"x", x}, {"w", w}, {"b", b}, {"out", out}});
  check_tile(op, out, first, x, w);
  const int64_t W = w.shape[0], IC = w.shape[1];
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::linear_forward_columns<T>(context_, typed<T>(out), typed<T>(x), typed<T>(w), typed<T>(b),
                                    int(numel_over(x, IC)), int(IC), int(out.shape.back()), int(first),
                                    int(W));
  });
}

void CudaOps::linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                      const Tensor& dout, int64_t first, const Tensor& x, const Tensor& w) {
  const char* op = "linear_backward_columns";
  const DType dtype =
      check_dtypes(op, {{"x", x}, {"w", w}, {"dout", dout}, {"dx", dx}}, {{"dw", dw}, {"db", db}});
  check_tile(op, dout, first, x, w);
  const int64_t W = w.shape[0], IC = w.shape[1];
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::linear_backward_columns<T>(context_, typed<T>(dx), typed<float>(dw), typed<float>(db),
                                     typed<T>(dout), typed<T>(x), typed<T>(w), int(numel_over(x, IC)),
                                     int(IC), int(dout.shape.back()), int(first), int(W));
  });
}

void CudaOps::dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) {
  const char* op = "dropout_forward";
  const DType dtype = check_dtypes(op, {{"x", x}, {"out", out}});
  const int B = int(x.shape[0]);
  on_compute_dtype(dtype, [&]<typename T>() {  // out may be x (in place)
    apply_dropout<T>(context_, typed<T>(out), typed<T>(x), dropout_keys(mask, op), mask.p, B,
                     numel_over(x, B), mask.element_offset);
  });
}

void CudaOps::dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) {
  const char* op = "dropout_backward";
  const DType dtype = check_dtypes(op, {{"dout", dout}, {"dx", dx}});
  const int B = int(dout.shape[0]);
  on_compute_dtype(dtype, [&]<typename T>() {
    apply_dropout<T>(context_, typed<T>(dx), typed<T>(dout), dropout_keys(mask, op), mask.p, B,
                     numel_over(dout, B), mask.element_offset);
  });
}

}  // namespace gpt::cuda
