// The bit-for-bit promises kernels/ops.h makes of every backend, held on CudaOps: the vocabulary-parallel
// embedding with the whole table (first = 0) is the plain embedding, forward and backward, and the
// vocabulary-parallel cross-entropy backward with all the columns is the plain backward. Without a device it
// prints a SKIPPED: line and checks nothing.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "tests/kernels_cuda/backends.h"

using gpt::testing::Backends;
using gpt::testing::have_device;
using gpt::testing::Pair;
using gpt::testing::random_values;

namespace {

// Token ids below vocab on the GPU, a third of them one id (repeats: the backward's sums).
gpt::Tensor gpu_tokens(Backends& b, int64_t n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(i % 3 == 0 ? 7 : (i * 7919) % vocab);
  gpt::Tensor shape;
  shape.shape = {n};
  gpt::Tensor t = b.make_like(shape, gpt::DType::kI32);
  b.gpu.upload(t, ids.data());
  return t;
}

}  // namespace

TEST_CASE("CudaOps' vocabulary-parallel embedding with the whole table is the embedding, bit for bit") {
  if (!have_device()) return;
  Backends b;
  const int B = 3, T = 37, C = 96, Vp = 384;
  gpt::Tensor tokens = gpu_tokens(b, int64_t(B) * T, 300);
  tokens.shape = {B, T};
  Pair wte = b.make(random_values(size_t(Vp) * C, 1), {Vp, C}), wpe = b.make(random_values(T * C, 2), {T, C});
  Pair plain = b.make(std::vector<float>(size_t(B) * T * C), {B, T, C});
  Pair rows = b.make(std::vector<float>(size_t(B) * T * C), {B, T, C});
  b.gpu.embedding_forward(plain.gpu, tokens, wte.gpu, wpe.gpu);
  b.gpu.embedding_forward_rows(rows.gpu, tokens, wte.gpu, 0, wpe.gpu);
  CHECK(b.host<float>(b.gpu, plain.gpu) == b.host<float>(b.gpu, rows.gpu));

  Pair dout = b.make(random_values(size_t(B) * T * C, 3), {B, T, C});
  Pair dwte = b.make(random_values(size_t(Vp) * C, 4), {Vp, C}),
       dwpe = b.make(random_values(T * C, 5), {T, C});
  Pair dwte_rows = b.make(random_values(size_t(Vp) * C, 4), {Vp, C});
  Pair dwpe_rows = b.make(random_values(T * C, 5), {T, C});
  b.gpu.embedding_backward(dwte.gpu, dwpe.gpu, dout.gpu, tokens);
  b.gpu.embedding_backward_rows(dwte_rows.gpu, 0, dwpe_rows.gpu, dout.gpu, tokens);
  CHECK(b.host<float>(b.gpu, dwte.gpu) == b.host<float>(b.gpu, dwte_rows.gpu));
  CHECK(b.host<float>(b.gpu, dwpe.gpu) == b.host<float>(b.gpu, dwpe_rows.gpu));
}

TEST_CASE("CudaOps' cross-entropy backward over all the columns is the plain backward, bit for bit") {
  if (!have_device()) return;
  Backends b;
  const int N = 37, V = 1000, Vp = 1024;
  const gpt::Tensor targets = gpu_tokens(b, N, V);
  Pair logits = b.make(random_values(size_t(N) * Vp, 6), {N, Vp});
  Pair probs = b.make(std::vector<float>(size_t(N) * Vp), {N, Vp}),
       losses = b.make(std::vector<float>(N), {N});
  b.gpu.cross_entropy_forward(losses.gpu, probs.gpu, logits.gpu, targets, V);
  Pair dlosses = b.make(random_values(N, 7), {N});
  Pair plain = b.make(std::vector<float>(size_t(N) * Vp), {N, Vp});
  Pair columns = b.make(std::vector<float>(size_t(N) * Vp), {N, Vp});
  b.gpu.cross_entropy_backward(plain.gpu, probs.gpu, targets, dlosses.gpu, V);
  b.gpu.cross_entropy_backward_columns(columns.gpu, probs.gpu, targets, dlosses.gpu, 0, V);
  CHECK(b.host<float>(b.gpu, plain.gpu) == b.host<float>(b.gpu, columns.gpu));
}
