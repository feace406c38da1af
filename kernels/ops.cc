// The seam's shared pieces (ops.h): the classifier's shape checks and its default, chunked implementation
// from the unfused ops, which is the CPU's and the reference that a fused backend is compared with.
#include "kernels/ops.h"

#include <algorithm>
#include <string>

namespace gpt {

Tensor row_range(const Tensor& t, int64_t first, int64_t count) {
  const int64_t K = t.shape.empty() ? 1 : t.shape.back();
  auto* base = static_cast<char*>(t.data) + dtype_bytes(t.dtype, first * K);
  return Tensor{base, {count, K}, t.dtype, t.device};
}

Tensor element_range(const Tensor& t, int64_t first, int64_t count) {
  auto* base = static_cast<char*>(t.data) + dtype_bytes(t.dtype, first);
  return Tensor{base, {count}, t.dtype, t.device};
}

ClassifierShape classifier_shape(const char* op, const Tensor& lnf, const Tensor& wte, const Tensor& targets,
                                 const Tensor& per_row, int vocab, const Tensor& scratch) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(std::string(op) + ": " + why + " (lnf " + lnf.describe() + ", wte " +
                                wte.describe() + ", scratch " + scratch.describe() + ")");
  };
  if (wte.shape.size() != 2 || scratch.shape.size() != 2 || lnf.shape.empty())
    fail("expected 2-D wte, scratch");
  ClassifierShape s;
  s.Vp = wte.shape[0];
  s.C = wte.shape[1];
  s.R = scratch.shape[0];
  if (lnf.shape.back() != s.C) fail("lnf's rows are not wte's width");
  s.N = lnf.numel() / s.C;
  if (targets.numel() != s.N || per_row.numel() != s.N) fail("targets and losses need one entry per row");
  if (scratch.shape[1] != s.Vp || s.R < 1) fail("scratch must be [R >= 1, Vp]");
  if (vocab < 1 || vocab > s.Vp) fail("vocab must be in [1, Vp]");
  return s;
}

void Ops::classifier_forward(const Tensor& losses, const Tensor& lnf, const Tensor& wte,
                             const Tensor& targets, int vocab, const Tensor& scratch) {
  const ClassifierShape s = classifier_shape("classifier_forward", lnf, wte, targets, losses, vocab, scratch);
  for (int64_t first = 0; first < s.N; first += s.R) {
    const int64_t rows = std::min(s.R, s.N - first);
    const Tensor logits = row_range(scratch, 0, rows);
    linear_forward(logits, row_range(lnf, first, rows), wte, Tensor{});
    // The probabilities overwrite the chunk's logits; only the losses outlive the chunk.
    cross_entropy_forward(element_range(losses, first, rows), logits, logits,
                          element_range(targets, first, rows), vocab);
  }
}

void Ops::classifier_backward(const Tensor& dlnf, const Tensor& dwte, const Tensor& losses, const Tensor& lnf,
                              const Tensor& wte, const Tensor& targets, const Tensor& dlosses, int vocab,
                              const Tensor& scratch) {
  const ClassifierShape s =
      classifier_shape("classifier_backward", lnf, wte, targets, dlosses, vocab, scratch);
  if (losses.numel() != s.N)
    throw std::invalid_argument("classifier_backward: losses need one entry per row");
  for (int64_t first = 0; first < s.N; first += s.R) {
    const int64_t rows = std::min(s.R, s.N - first);
    const Tensor logits = row_range(scratch, 0, rows), x = row_range(lnf, first, rows);
    const Tensor chunk_targets = element_range(targets, first, rows);
    linear_forward(logits, x, wte, Tensor{});
    // The forward's softmax again, then dlogits in place of the probabilities.
    cross_entropy_forward(element_range(losses, first, rows), logits, logits, chunk_targets, vocab);
    cross_entropy_backward(logits, logits, chunk_targets, element_range(dlosses, first, rows), vocab);
    linear_backward(row_range(dlnf, first, rows), dwte, Tensor{}, logits, x, wte);
  }
}

}  // namespace gpt
