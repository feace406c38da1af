// MixedPrecisionCpuOps: the mixed-precision contract on the CPU; see mixed_precision_ops.h.
#include "kernels/cpu/mixed_precision_ops.h"

#include <cstring>
#include <deque>
#include <initializer_list>
#include <vector>

#include "kernels/mixed_precision.h"

namespace gpt {
namespace {

// Whether a call takes the contract in a half dtype: its first non-empty `compute` tensor is fp16 or bf16.
// A call in fp16, bf16 or fp32 must keep the contract (kernels/mixed_precision.h), so a dtype mix that CUDA
// refuses fails here too; an fp64 call (the gradient checks) is CpuOps' own.
bool half_call(const char* op, std::initializer_list<Named> compute, std::initializer_list<Named> fp32 = {}) {
  for (const Named& n : compute) {
    if (n.tensor.empty()) continue;
    if (n.tensor.dtype == DType::kF64) return false;
    return is_half(check_mixed_dtypes("MixedPrecisionCpuOps", op, compute, fp32));
  }
  return false;
}

// fp32 host copies of one call's half tensors: in() widens a tensor the op reads (exact), out() gives room
// for one it overwrites, inout() both; narrow() rounds every written copy back into its tensor once. fp32 and
// empty tensors pass through as themselves. Tensors at one address (an op in place) share one copy.
class Widening {
 public:
  explicit Widening(CpuOps& ops) : ops_(ops) {}
  Tensor in(const Tensor& t) { return at(t, true, false); }
  Tensor out(const Tensor& t) { return at(t, false, true); }
  Tensor inout(const Tensor& t) { return at(t, true, true); }
  void narrow() {
    for (const Entry& e : entries_)
      if (e.written) ops_.cast(e.tensor, wide(e), 1.0f);
  }

 private:
  struct Entry {
    Tensor tensor;
    std::vector<float> values;
    bool widened = false, written = false;
  };
  static Tensor wide(const Entry& e) {
    return Tensor{const_cast<float*>(e.values.data()), e.tensor.shape, DType::kF32, e.tensor.device};
  }
  Tensor at(const Tensor& t, bool read, bool written) {
    if (t.empty() || !is_half(t.dtype)) return t;
    Entry* entry = nullptr;
    for (Entry& e : entries_)
      if (e.tensor.data == t.data) entry = &e;
    if (!entry) {
      entry = &entries_.emplace_back();
      entry->tensor = t;
      entry->values.resize(size_t(t.numel()));
    }
    if (read && !entry->widened) {
      ops_.cast(wide(*entry), t, 1.0f);
      entry->widened = true;
    }
    entry->written = entry->written || written;
    return wide(*entry);
  }

  CpuOps& ops_;
  std::deque<Entry> entries_;  // stable addresses
};

}  // namespace

void MixedPrecisionCpuOps::fill(const Tensor& t, double value) {
  if (value == 0.0 && is_half(t.dtype)) {
    std::memset(t.data, 0, t.nbytes());  // +0 is all zero bits in every float format
    return;
  }
  CpuOps::fill(t, value);
}

void MixedPrecisionCpuOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                             const Tensor& wpe) {
  if (!half_call("embedding_forward", {{"out", out}, {"wte", wte}, {"wpe", wpe}}))
    return CpuOps::embedding_forward(out, tokens, wte, wpe);
  Widening w(*this);
  CpuOps::embedding_forward(w.out(out), tokens, w.in(wte), w.in(wpe));
  w.narrow();
}

void MixedPrecisionCpuOps::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                              const Tensor& tokens) {
  if (!half_call("embedding_backward", {{"dout", dout}}, {{"dwte", dwte}, {"dwpe", dwpe}}))
    return CpuOps::embedding_backward(dwte, dwpe, dout, tokens);
  Widening w(*this);
  CpuOps::embedding_backward(dwte, dwpe, w.in(dout), tokens);
}

void MixedPrecisionCpuOps::embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                                  int64_t first, const Tensor& wpe) {
  if (!half_call("embedding_forward_rows", {{"out", out}, {"wte", wte}, {"wpe", wpe}}))
    return CpuOps::embedding_forward_rows(out, tokens, wte, first, wpe);
  Widening w(*this);
  CpuOps::embedding_forward_rows(w.out(out), tokens, w.in(wte), first, w.in(wpe));
  w.narrow();
}

void MixedPrecisionCpuOps::embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe,
                                                   const Tensor& dout, const Tensor& tokens) {
  if (!half_call("embedding_backward_rows", {{"dout", dout}}, {{"dwte", dwte}, {"dwpe", dwpe}}))
    return CpuOps::embedding_backward_rows(dwte, first, dwpe, dout, tokens);
  Widening w(*this);
  CpuOps::embedding_backward_rows(dwte, first, dwpe, w.in(dout), tokens);
}

void MixedPrecisionCpuOps::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                             const Tensor& x, const Tensor& w, const Tensor& b) {
  if (!half_call("layernorm_forward", {{"x", x}, {"w", w}, {"b", b}, {"out", out}},
                 {{"mean", mean}, {"rstd", rstd}}))
    return CpuOps::layernorm_forward(out, mean, rstd, x, w, b);
  Widening h(*this);
  CpuOps::layernorm_forward(h.out(out), mean, rstd, h.in(x), h.in(w), h.in(b));
  h.narrow();
}

void MixedPrecisionCpuOps::layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                              const Tensor& dout, const Tensor& x, const Tensor& w,
                                              const Tensor& mean, const Tensor& rstd) {
  if (!half_call("layernorm_backward", {{"x", x}, {"w", w}, {"dout", dout}, {"dx", dx}},
                 {{"dw", dw}, {"db", db}, {"mean", mean}, {"rstd", rstd}}))
    return CpuOps::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd);
  Widening h(*this);
  CpuOps::layernorm_backward(h.inout(dx), dw, db, h.in(dout), h.in(x), h.in(w), mean, rstd);
  h.narrow();
}

void MixedPrecisionCpuOps::linear_forward(const Tensor& out, const Tensor& x, const Tensor& w,
                                          const Tensor& b) {
  if (!half_call("linear_forward", {{"x", x}, {"w", w}, {"b", b}, {"out", out}}))
    return CpuOps::linear_forward(out, x, w, b);
  Widening h(*this);
  CpuOps::linear_forward(h.out(out), h.in(x), h.in(w), h.in(b));
  h.narrow();
}

void MixedPrecisionCpuOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                           const Tensor& dout, const Tensor& x, const Tensor& w) {
  if (!half_call("linear_backward", {{"x", x}, {"w", w}, {"dout", dout}, {"dx", dx}},
                 {{"dw", dw}, {"db", db}}))
    return CpuOps::linear_backward(dx, dw, db, dout, x, w);
  Widening h(*this);
  CpuOps::linear_backward(h.out(dx), dw, db, h.in(dout), h.in(x), h.in(w));
  h.narrow();
}

void MixedPrecisionCpuOps::linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x,
                                                  const Tensor& w, const Tensor& b) {
  if (!half_call("linear_forward_columns", {{"x", x}, {"w", w}, {"b", b}, {"out", out}}))
    return CpuOps::linear_forward_columns(out, first, x, w, b);
  Widening h(*this);  // out's other columns are kept: read as well as written
  CpuOps::linear_forward_columns(h.inout(out), first, h.in(x), h.in(w), h.in(b));
  h.narrow();
}

void MixedPrecisionCpuOps::linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                                   const Tensor& dout, int64_t first, const Tensor& x,
                                                   const Tensor& w) {
  if (!half_call("linear_backward_columns", {{"x", x}, {"w", w}, {"dout", dout}, {"dx", dx}},
                 {{"dw", dw}, {"db", db}}))
    return CpuOps::linear_backward_columns(dx, dw, db, dout, first, x, w);
  Widening h(*this);
  CpuOps::linear_backward_columns(h.inout(dx), dw, db, h.in(dout), first, h.in(x), h.in(w));
  h.narrow();
}

void MixedPrecisionCpuOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                             const DropoutMask* dropout) {
  if (!half_call("attention_forward", {{"qkv", qkv}, {"out", out}, {"att", att}}))
    return CpuOps::attention_forward(out, att, qkv, dropout);
  Widening h(*this);
  CpuOps::attention_forward(h.out(out), h.out(att), h.in(qkv), dropout);
  h.narrow();
}

void MixedPrecisionCpuOps::attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) {
  if (!half_call("attention_decode", {{"qkv", qkv}, {"out", out}, {"att", att}}))
    return CpuOps::attention_decode(out, att, qkv);
  Widening h(*this);
  CpuOps::attention_decode(h.out(out), h.out(att), h.in(qkv));
  h.narrow();
}

void MixedPrecisionCpuOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                              const Tensor& out, const Tensor& att,
                                              const DropoutMask* dropout) {
  if (!half_call("attention_backward",
                 {{"qkv", qkv}, {"dout", dout}, {"out", out}, {"att", att}, {"dqkv", dqkv}}))
    return CpuOps::attention_backward(dqkv, dout, qkv, out, att, dropout);
  Widening h(*this);
  CpuOps::attention_backward(h.out(dqkv), h.in(dout), h.in(qkv), h.in(out), h.in(att), dropout);
  h.narrow();
}

void MixedPrecisionCpuOps::gelu_forward(const Tensor& out, const Tensor& x) {
  if (!half_call("gelu_forward", {{"x", x}, {"out", out}})) return CpuOps::gelu_forward(out, x);
  Widening h(*this);
  CpuOps::gelu_forward(h.out(out), h.in(x));
  h.narrow();
}

void MixedPrecisionCpuOps::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) {
  if (!half_call("gelu_backward", {{"x", x}, {"dout", dout}, {"dx", dx}}))
    return CpuOps::gelu_backward(dx, x, dout);
  Widening h(*this);
  CpuOps::gelu_backward(h.out(dx), h.in(x), h.in(dout));
  h.narrow();
}

void MixedPrecisionCpuOps::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (!half_call("add", {{"a", a}, {"b", b}, {"out", out}})) return CpuOps::add(out, a, b);
  Widening h(*this);
  CpuOps::add(h.out(out), h.in(a), h.in(b));
  h.narrow();
}

void MixedPrecisionCpuOps::dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) {
  if (!half_call("dropout_forward", {{"x", x}, {"out", out}})) return CpuOps::dropout_forward(out, x, mask);
  Widening h(*this);
  CpuOps::dropout_forward(h.out(out), h.in(x), mask);
  h.narrow();
}

void MixedPrecisionCpuOps::dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) {
  if (!half_call("dropout_backward", {{"dout", dout}, {"dx", dx}}))
    return CpuOps::dropout_backward(dx, dout, mask);
  Widening h(*this);
  CpuOps::dropout_backward(h.out(dx), h.in(dout), mask);
  h.narrow();
}

void MixedPrecisionCpuOps::cross_entropy_forward(const Tensor& losses, const Tensor& probs,
                                                 const Tensor& logits, const Tensor& targets, int vocab) {
  if (!half_call("cross_entropy_forward", {{"logits", logits}, {"probs", probs}}, {{"losses", losses}}))
    return CpuOps::cross_entropy_forward(losses, probs, logits, targets, vocab);
  Widening h(*this);
  CpuOps::cross_entropy_forward(losses, h.out(probs), h.in(logits), targets, vocab);
  h.narrow();
}

void MixedPrecisionCpuOps::cross_entropy_backward(const Tensor& dlogits, const Tensor& probs,
                                                  const Tensor& targets, const Tensor& dlosses, int vocab) {
  if (!half_call("cross_entropy_backward", {{"probs", probs}, {"dlogits", dlogits}}, {{"dlosses", dlosses}}))
    return CpuOps::cross_entropy_backward(dlogits, probs, targets, dlosses, vocab);
  Widening h(*this);
  CpuOps::cross_entropy_backward(h.out(dlogits), h.in(probs), targets, dlosses, vocab);
  h.narrow();
}

void MixedPrecisionCpuOps::cross_entropy_stats(const Tensor& stats, const Tensor& logits,
                                               const Tensor& targets, int64_t first, int vocab) {
  if (!half_call("cross_entropy_stats", {{"logits", logits}}, {{"stats", stats}}))
    return CpuOps::cross_entropy_stats(stats, logits, targets, first, vocab);
  Widening h(*this);
  CpuOps::cross_entropy_stats(stats, h.in(logits), targets, first, vocab);
}

void MixedPrecisionCpuOps::cross_entropy_merge(const Tensor& losses, const Tensor& probs,
                                               const Tensor& logits, const Tensor& stats, int64_t first,
                                               int vocab) {
  if (!half_call("cross_entropy_merge", {{"logits", logits}, {"probs", probs}},
                 {{"losses", losses}, {"stats", stats}}))
    return CpuOps::cross_entropy_merge(losses, probs, logits, stats, first, vocab);
  Widening h(*this);
  CpuOps::cross_entropy_merge(losses, h.out(probs), h.in(logits), stats, first, vocab);
  h.narrow();
}

void MixedPrecisionCpuOps::cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs,
                                                          const Tensor& targets, const Tensor& dlosses,
                                                          int64_t first, int vocab) {
  if (!half_call("cross_entropy_backward_columns", {{"probs", probs}, {"dlogits", dlogits}},
                 {{"dlosses", dlosses}}))
    return CpuOps::cross_entropy_backward_columns(dlogits, probs, targets, dlosses, first, vocab);
  Widening h(*this);
  CpuOps::cross_entropy_backward_columns(h.out(dlogits), h.in(probs), targets, dlosses, first, vocab);
  h.narrow();
}

}  // namespace gpt
