// CpuOps: the device seam on the host; see cpu_ops.h.
#include "kernels/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/quant/quantize.h"
#include "tensor/half.h"

namespace gpt {
namespace {

// Calls f.template operator()<Real>() for the float dtype of t (fp32 or fp64).
template <typename F>
void on_float(const Tensor& t, F&& f) {
  if (t.dtype == DType::kF32) {
    f.template operator()<float>();
  } else if (t.dtype == DType::kF64) {
    f.template operator()<double>();
  } else {
    throw UnsupportedOp(std::string("CpuOps: expected an f32 or f64 tensor, got ") + t.describe());
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}

int64_t last_dim(const Tensor& t) {
  return t.shape.back();
}

// The shapes of one tile of a linear layer (see Ops::linear_forward_columns): whole [N, OC] (out or dout)
// against x [N, IC], the tile's w [W, IC], its optional bias or bias gradient [W], and the optional [N, IC].
// Returns N.
int64_t check_tile(const char* op, const Tensor& whole, int64_t first, const Tensor& x, const Tensor& w,
                   const Tensor& bias, const Tensor& dx) {
  const bool w_ok = w.shape.size() == 2 && w.shape[1] > 0 && !whole.shape.empty();
  const int64_t W = w_ok ? w.shape[0] : 0, IC = w_ok ? w.shape[1] : 1,
                OC = whole.shape.empty() ? 0 : last_dim(whole);
  const int64_t N = x.numel() / IC;
  const bool ok = w_ok && x.numel() == N * IC && OC > 0 && whole.numel() == N * OC && first >= 0 &&
                  first + W <= OC && (bias.empty() || bias.numel() == W) &&
                  (dx.empty() || dx.numel() == N * IC) && N <= INT32_MAX && OC <= INT32_MAX &&
                  IC <= INT32_MAX;
  if (!ok)
    throw std::invalid_argument(
        std::string("CpuOps::") + op + ": columns from " + std::to_string(first) + " of " + whole.describe() +
        " with x " + x.describe() + ", w " + w.describe() +
        (bias.empty() ? "" : ", bias " + bias.describe()) + (dx.empty() ? "" : ", dx " + dx.describe()) +
        " (want w [W, IC], x [N, IC], the whole layer [N, OC], first + W <= OC, [W] and "
        "[N, IC] for the optional ones)");
  return N;
}

// The attention kernels' dropout for a seam mask (absent: none).
cpu::AttentionDropout attention_dropout(const DropoutMask* mask) {
  return mask ? cpu::AttentionDropout{mask->p, mask->keys, mask->element_offset} : cpu::AttentionDropout{};
}

[[noreturn]] void bad_arguments(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("CpuOps::") + op + ": " + what);
}

// The float tensors of one call share a dtype (fp32 or fp64); empty ones are absent optional arguments. A
// mix is UnsupportedOp: the CUDA backend's mixed-precision contract (kernels/ops.h), which the CPU lacks.
void require_same_dtype(const char* op, const Tensor& reference,
                        std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    if (!t->empty() && t->dtype != reference.dtype)
      throw UnsupportedOp(std::string("CpuOps::") + op + ": " + t->describe() + " next to " +
                          reference.describe() + " (want one float dtype, fp32 or fp64)");
}

// A vocabulary-parallel embedding's shapes: out or dout [B, T, C], tokens [B, T] i32, the slice [R, C] of the
// table (or empty, backward only), wpe [maxT >= T, C] or empty. Returns R.
int64_t check_embedding_rows(const char* op, const Tensor& activations, const Tensor& tokens,
                             const Tensor& slice, int64_t first, const Tensor& wpe) {
  const bool ok3 = activations.shape.size() == 3;
  const int64_t T = ok3 ? activations.shape[1] : 0, C = ok3 ? activations.shape[2] : 0;
  const int64_t R = slice.empty() || C <= 0 ? 0 : slice.numel() / C;
  const bool ok = ok3 && C > 0 && tokens.dtype == DType::kI32 && tokens.numel() * C == activations.numel() &&
                  first >= 0 && (slice.empty() || slice.numel() == R * C) &&
                  (wpe.empty() || (wpe.numel() % C == 0 && wpe.numel() / C >= T));
  if (!ok)
    bad_arguments(op, "rows from " + std::to_string(first) + " with activations " + activations.describe() +
                          ", tokens " + tokens.describe() + ", wte " + slice.describe() + ", wpe " +
                          wpe.describe() +
                          " (want [B, T, C], i32 [B, T], [R, C], [maxT >= T, C] or empty, first >= 0)");
  require_same_dtype(op, activations, {&slice, &wpe});
  return R;
}

// A vocabulary-parallel cross-entropy's columns [N, W] (logits, probs) against targets [N] i32; per_row [N *
// per_row] is the op's per-row tensor (stats: 3, losses or dlosses: 1). Returns N.
int64_t check_loss_columns(const char* op, const Tensor& columns, const Tensor& targets,
                           const Tensor& per_row, int64_t values_per_row, int64_t first, int vocab) {
  const int64_t N = columns.shape.size() == 2 ? columns.shape[0] : -1;
  const bool ok = N >= 0 && columns.shape[1] <= INT32_MAX && N <= INT32_MAX && targets.dtype == DType::kI32 &&
                  targets.numel() == N && per_row.numel() == N * values_per_row && first >= 0 && vocab > 0;
  if (!ok)
    bad_arguments(op, "columns from " + std::to_string(first) + " of vocabulary " + std::to_string(vocab) +
                          " with " + columns.describe() + ", targets " + targets.describe() + " and " +
                          per_row.describe() + " (want [N, W], i32 [N], [N, " +
                          std::to_string(values_per_row) + "], first >= 0, vocab > 0)");
  require_same_dtype(op, columns, {&per_row});
  return N;
}

}  // namespace

CpuOps& cpu_ops() {
  static CpuOps ops;
  return ops;
}

void CpuOps::upload(const Tensor& dst, const void* host) {
  std::memcpy(dst.data, host, dst.nbytes());
}

void CpuOps::download(void* host, const Tensor& src) {
  std::memcpy(host, src.data, src.nbytes());
}

void CpuOps::copy(const Tensor& dst, const Tensor& src) {
  if (dst.nbytes() != src.nbytes())
    throw std::invalid_argument("CpuOps::copy: " + src.describe() + " into " + dst.describe());
  if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.nbytes());
}

void CpuOps::fill(const Tensor& t, double value) {
  on_float(t, [&]<typename Real>() { std::fill(ptr<Real>(t), ptr<Real>(t) + t.numel(), Real(value)); });
}

void CpuOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                               const Tensor& wpe) {
  on_float(out, [&]<typename Real>() {
    cpu::embedding_forward(ptr<Real>(out), ptr<int32_t>(tokens), ptr<Real>(wte), ptr<Real>(wpe),
                           int(out.shape[0]), int(out.shape[1]), int(out.shape[2]));
  });
}

void CpuOps::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                const Tensor& tokens) {
  on_float(dout, [&]<typename Real>() {
    cpu::embedding_backward(ptr<Real>(dwte), ptr<Real>(dwpe), ptr<Real>(dout), ptr<int32_t>(tokens),
                            int(dout.shape[0]), int(dout.shape[1]), int(dout.shape[2]));
  });
}

void CpuOps::embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte, int64_t first,
                                    const Tensor& wpe) {
  const int64_t R = check_embedding_rows("embedding_forward_rows", out, tokens, wte, first, wpe);
  on_float(out, [&]<typename Real>() {
    cpu::embedding_forward_rows(ptr<Real>(out), ptr<int32_t>(tokens), ptr<Real>(wte), first, R,
                                wpe.empty() ? nullptr : ptr<Real>(wpe), int(out.shape[0]), int(out.shape[1]),
                                int(out.shape[2]));
  });
}

void CpuOps::embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe,
                                     const Tensor& dout, const Tensor& tokens) {
  const int64_t R = check_embedding_rows("embedding_backward_rows", dout, tokens, dwte, first, dwpe);
  on_float(dout, [&]<typename Real>() {
    cpu::embedding_backward_rows(
        dwte.empty() ? nullptr : ptr<Real>(dwte), first, R, dwpe.empty() ? nullptr : ptr<Real>(dwpe),
        ptr<Real>(dout), ptr<int32_t>(tokens), int(dout.shape[0]), int(dout.shape[1]), int(dout.shape[2]));
  });
}

void CpuOps::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                               const Tensor& w, const Tensor& b) {
  const int64_t C = w.numel();
  on_float(x, [&]<typename Real>() {
    cpu::layernorm_forward(ptr<Real>(out), ptr<Real>(mean), ptr<Real>(rstd), ptr<Real>(x), ptr<Real>(w),
                           ptr<Real>(b), int(x.numel() / C), int(C));
  });
}

void CpuOps::layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = w.numel();
  on_float(x, [&]<typename Real>() {
    cpu::layernorm_backward(ptr<Real>(dx), ptr<Real>(dw), ptr<Real>(db), ptr<Real>(dout), ptr<Real>(x),
                            ptr<Real>(w), ptr<Real>(mean), ptr<Real>(rstd), int(x.numel() / C), int(C));
  });
}

void CpuOps::linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t OC = w.shape[0], IC = w.shape[1];
  on_float(x, [&]<typename Real>() {
    cpu::linear_forward(ptr<Real>(out), ptr<Real>(x), ptr<Real>(w), ptr<Real>(b), int(x.numel() / IC),
                        int(IC), int(OC));
  });
}

void CpuOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                             const Tensor& x, const Tensor& w) {
  const int64_t OC = w.shape[0], IC = w.shape[1];
  if (!dx.empty()) fill(dx, 0);  // the kernel accumulates; the op overwrites
  on_float(x, [&]<typename Real>() {
    cpu::linear_backward(ptr<Real>(dx), ptr<Real>(dw), ptr<Real>(db), ptr<Real>(dout), ptr<Real>(x),
                         ptr<Real>(w), int(x.numel() / IC), int(IC), int(OC));
  });
}

void CpuOps::linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                                    const Tensor& b) {
  const int64_t N = check_tile("linear_forward_columns", out, first, x, w, b, Tensor());
  const int64_t W = w.shape[0], IC = w.shape[1], OC = last_dim(out);
  on_float(x, [&]<typename Real>() {
    cpu::linear_forward_columns(ptr<Real>(out), ptr<Real>(x), ptr<Real>(w), ptr<Real>(b), int(N), int(IC),
                                int(OC), int(first), int(W));
  });
}

void CpuOps::linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                     int64_t first, const Tensor& x, const Tensor& w) {
  const int64_t N = check_tile("linear_backward_columns", dout, first, x, w, db, dx);
  const int64_t W = w.shape[0], IC = w.shape[1], OC = last_dim(dout);
  if (dw.numel() != W * IC)
    throw std::invalid_argument("CpuOps::linear_backward_columns: dw " + dw.describe() + " for w " +
                                w.describe());
  on_float(x, [&]<typename Real>() {
    cpu::linear_backward_columns(ptr<Real>(dx), ptr<Real>(dw), ptr<Real>(db), ptr<Real>(dout), ptr<Real>(x),
                                 ptr<Real>(w), int(N), int(IC), int(OC), int(first), int(W));
  });
}

void CpuOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                               const DropoutMask* dropout) {
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(last_dim(out));
  const cpu::AttentionDropout spec = attention_dropout(dropout);
  on_float(qkv, [&]<typename Real>() {
    cpu::attention_forward(ptr<Real>(out), ptr<Real>(att), ptr<Real>(qkv), B, T, C, NH,
                           dropout ? &spec : nullptr);
  });
}

void CpuOps::attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) {
  const int NH = int(att.shape[0]), n = int(att.shape[1]), C = int(last_dim(out));
  on_float(qkv, [&]<typename Real>() {
    cpu::attention_decode(ptr<Real>(out), ptr<Real>(att), ptr<Real>(qkv), n, C, NH);
  });
}

// Keeps the probabilities (attention_residual's default), so the forward's output is not needed.
void CpuOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor&,
                                const Tensor& att, const DropoutMask* dropout) {
  const int B = int(att.shape[0]), NH = int(att.shape[1]), T = int(att.shape[2]), C = int(last_dim(dout));
  const cpu::AttentionDropout spec = attention_dropout(dropout);
  fill(dqkv, 0);  // the kernel accumulates; the op overwrites
  on_float(qkv, [&]<typename Real>() {
    cpu::attention_backward(ptr<Real>(dqkv), ptr<Real>(dout), ptr<Real>(qkv), ptr<Real>(att), B, T, C, NH,
                            dropout ? &spec : nullptr);
  });
}

void CpuOps::gelu_forward(const Tensor& out, const Tensor& x) {
  on_float(x, [&]<typename Real>() { cpu::gelu_forward(ptr<Real>(out), ptr<Real>(x), x.numel()); });
}

void CpuOps::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) {
  fill(dx, 0);  // the kernel accumulates; the op overwrites
  on_float(x, [&]<typename Real>() {
    cpu::gelu_backward(ptr<Real>(dx), ptr<Real>(x), ptr<Real>(dout), x.numel());
  });
}

void CpuOps::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  on_float(a, [&]<typename Real>() {
    cpu::residual_forward(ptr<Real>(out), ptr<Real>(a), ptr<Real>(b), a.numel());
  });
}

void CpuOps::dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) {
  const int B = int(x.shape[0]);
  on_float(x, [&]<typename Real>() {
    cpu::dropout_forward(ptr<Real>(out), ptr<Real>(x), mask.keys, mask.p, B, x.numel() / B,
                         mask.element_offset);
  });
}

void CpuOps::dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) {
  const int B = int(dout.shape[0]);
  on_float(dout, [&]<typename Real>() {
    cpu::dropout_backward(ptr<Real>(dx), ptr<Real>(dout), mask.keys, mask.p, B, dout.numel() / B,
                          mask.element_offset);
  });
}

void CpuOps::cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                   const Tensor& targets, int vocab) {
  on_float(logits, [&]<typename Real>() {
    cpu::softmax_cross_entropy_forward(ptr<Real>(losses), ptr<Real>(probs), ptr<Real>(logits),
                                       ptr<int32_t>(targets), int(logits.shape[0]), vocab,
                                       int(logits.shape[1]));
  });
}

void CpuOps::cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                    const Tensor& dlosses, int vocab) {
  on_float(probs, [&]<typename Real>() {
    cpu::softmax_cross_entropy_backward(ptr<Real>(dlogits), ptr<Real>(probs), ptr<int32_t>(targets),
                                        ptr<Real>(dlosses), int(probs.shape[0]), vocab, int(probs.shape[1]));
  });
}

void CpuOps::cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets,
                                 int64_t first, int vocab) {
  const int64_t N = check_loss_columns("cross_entropy_stats", logits, targets, stats, 3, first, vocab);
  on_float(logits, [&]<typename Real>() {
    cpu::cross_entropy_stats(ptr<Real>(stats), ptr<Real>(logits), ptr<int32_t>(targets), int(N),
                             int(logits.shape[1]), first, vocab);
  });
}

void CpuOps::cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                 const Tensor& stats, int64_t first, int vocab) {
  const char* op = "cross_entropy_merge";
  const int64_t N = logits.shape.size() == 2 ? logits.shape[0] : 0;
  const bool ok = N > 0 && stats.numel() % (3 * N) == 0 && stats.numel() > 0 && losses.numel() == N &&
                  probs.numel() == logits.numel() && first >= 0 && vocab > 0 && logits.shape[1] <= INT32_MAX;
  if (!ok)
    bad_arguments(op, "losses " + losses.describe() + ", probs " + probs.describe() + ", logits " +
                          logits.describe() + ", stats " + stats.describe() + ", columns from " +
                          std::to_string(first) + " (want [N], [N, W], [N, W], [G, N, 3], first >= 0)");
  require_same_dtype(op, logits, {&losses, &probs, &stats});
  const int64_t G = stats.numel() / (3 * N);
  on_float(logits, [&]<typename Real>() {
    cpu::cross_entropy_merge(ptr<Real>(losses), ptr<Real>(probs), ptr<Real>(logits), ptr<Real>(stats), int(G),
                             int(N), int(logits.shape[1]), first, vocab);
  });
}

void CpuOps::cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                            const Tensor& dlosses, int64_t first, int vocab) {
  const char* op = "cross_entropy_backward_columns";
  const int64_t N = check_loss_columns(op, probs, targets, dlosses, 1, first, vocab);
  if (dlogits.numel() != probs.numel())
    bad_arguments(op, "dlogits " + dlogits.describe() + " for probs " + probs.describe() + " (want [N, W])");
  require_same_dtype(op, probs, {&dlogits});
  on_float(probs, [&]<typename Real>() {
    cpu::cross_entropy_backward_columns(ptr<Real>(dlogits), ptr<Real>(probs), ptr<int32_t>(targets),
                                        ptr<Real>(dlosses), int(N), int(probs.shape[1]), first, vocab);
  });
}

double CpuOps::sum(const Tensor& x) {
  double total = 0;
  on_float(x, [&]<typename Real>() {
    const Real* v = ptr<Real>(x);
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(v[i]);
  });
  return total;
}

void CpuOps::cast(const Tensor& dst, const Tensor& src, float scale) {
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype && (src.dtype == DType::kF32 || src.dtype == DType::kF64)) {
    if (scale == 1.0f) {
      copy(dst, src);
    } else {
      on_float(src, [&]<typename Real>() {
        for (int64_t i = 0; i < n; ++i) ptr<Real>(dst)[i] = ptr<Real>(src)[i] * Real(scale);
      });
    }
    return;
  }
  if (src.dtype == DType::kF32) {
    // Scale a cache-sized piece at a time, then narrow it with the bulk (vectorized) conversion.
    constexpr int64_t kPiece = 4096;
    float scaled[kPiece];
    for (int64_t begin = 0; begin < n; begin += kPiece) {
      const int64_t len = std::min(kPiece, n - begin);
      const float* piece = ptr<float>(src) + begin;
      if (scale != 1.0f) {
        for (int64_t i = 0; i < len; ++i) scaled[i] = piece[i] * scale;
        piece = scaled;
      }
      if (dst.dtype == DType::kF16) {
        f32_to_f16(piece, ptr<uint16_t>(dst) + begin, len);
      } else if (dst.dtype == DType::kBF16) {
        f32_to_bf16(piece, ptr<uint16_t>(dst) + begin, len);
      } else {
        throw std::invalid_argument("CpuOps::cast: f32 into " + dst.describe());
      }
    }
    return;
  }
  if (src.dtype == dst.dtype && scale == 1.0f) return copy(dst, src);  // fp16 or bf16 as it is
  if (dst.dtype != DType::kF32 || scale != 1.0f)
    throw std::invalid_argument("CpuOps::cast: " + src.describe() + " into " + dst.describe() +
                                " with a scale");
  if (src.dtype == DType::kF16) {
    f16_to_f32(ptr<uint16_t>(src), ptr<float>(dst), n);
  } else if (src.dtype == DType::kBF16) {
    bf16_to_f32(ptr<uint16_t>(src), ptr<float>(dst), n);
  } else {
    throw std::invalid_argument("CpuOps::cast: from " + src.describe());
  }
}

void CpuOps::add_into(const Tensor& dst, const Tensor& src) {
  if (dst.dtype != src.dtype)
    throw std::invalid_argument("CpuOps::add_into: " + src.describe() + " into " + dst.describe());
  on_float(dst, [&]<typename Real>() {
    Real* d = ptr<Real>(dst);
    const Real* s = ptr<Real>(src);
    const int64_t n = dst.numel();
    for (int64_t j = 0; j < n; ++j) d[j] += s[j];
  });
}

double CpuOps::sum_of_squares(const Tensor& x) {
  const float* v = ptr<float>(x);
  const int64_t n = x.numel();
  // Fixed-size chunks summed in a fixed order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) s += double(v[i]) * double(v[i]);
    partial[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

bool CpuOps::all_finite(const Tensor& x) {
  const float* v = ptr<float>(x);
  const int64_t n = x.numel();
  bool bad = false;
#pragma omp parallel for reduction(|| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad = bad || !std::isfinite(v[i]);
  return !bad;
}

void CpuOps::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const AdamWHyper& hyper, int64_t step, float grad_scale) {
  for (const Tensor* t : {&param, &grad, &m, &v})
    if (t->dtype != DType::kF32)
      throw UnsupportedOp("CpuOps::adamw: expected f32 state, got " + t->describe());
  cpu::adamw_update(ptr<float>(param), ptr<float>(grad), ptr<float>(m), ptr<float>(v), param.numel(), hyper,
                    step, grad_scale);
}

bool CpuOps::quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                      int block) {
  return quant::quantize_slices(x.data, x.dtype, slice_len, count, bits, block, ptr<uint8_t>(out));
}

bool CpuOps::quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error,
                                    int64_t slice_len, int64_t count, int bits, int block, float beta) {
  return quant::quantize_slices_with_feedback(ptr<float>(x), slice_len, count, bits, block, beta,
                                              ptr<uint8_t>(error), ptr<uint8_t>(out));
}

void CpuOps::dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                        int block, DType round_to) {
  if (out.dtype == DType::kF32)
    return quant::dequantize_slices(ptr<uint8_t>(in), slice_len, count, bits, block, ptr<float>(out),
                                    round_to);
  if (out.dtype != round_to)
    throw std::invalid_argument("CpuOps::dequantize: into " + out.describe() + " rounded through " +
                                dtype_name(round_to) + " (want fp32 or that dtype)");
  // A slice at a time through fp32, then narrowed: exact, the values are already rounded to out's dtype.
  std::vector<float> values(static_cast<size_t>(slice_len));
  const size_t in_bytes = quant::quantized_bytes(slice_len, bits, block);
  for (int64_t i = 0; i < count; ++i) {
    quant::dequantize_slices(ptr<uint8_t>(in) + i * in_bytes, slice_len, 1, bits, block, values.data(),
                             round_to);
    cast(element_range(out, i * slice_len, slice_len), Tensor{values.data(), {slice_len}, DType::kF32}, 1.0f);
  }
}

void CpuOps::dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                            int block) {
  quant::dequantize_add_slices(ptr<uint8_t>(in), slice_len, count, bits, block, ptr<float>(acc));
}

void CpuOps::divide(const Tensor& x, float divisor) {
  float* v = ptr<float>(x);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) v[i] /= divisor;
}

}  // namespace gpt
