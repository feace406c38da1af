// CudaOps against CpuOps on the embedding, LayerNorm and dropout ops. The embedding (forward and backward)
// and dropout must agree bit for bit: they add in the CPU's order, and the masks come from the same bits.
// LayerNorm sums its rows in the CPU's order but may fuse multiply-adds elsewhere, and sums dweight/dbias in
// chunks, so it must agree to 1e-5 relative (to values of order one). Shapes cover the 16-byte vector paths
// (C or n a multiple of 4) and the scalar ones, rows that do not fill a block, and token runs longer than a
// kernel's loads in flight. Without a device it prints a SKIPPED: line and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/kernels_cuda/backends.h"

using gpt::testing::Backends;
using gpt::testing::have_device;
using gpt::testing::Pair;
using gpt::testing::random_values;

namespace {

constexpr double kTolerance = 1e-5;

// The same int32 tokens on both backends: token `frequent` at about `share` of the positions, the others
// uniform in [0, vocab).
Pair make_tokens(Backends& b, int B, int T, int vocab, int frequent, double share, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> any(0, vocab - 1);
  std::bernoulli_distribution pick_frequent(share);
  std::vector<int32_t> tokens(size_t(B) * T);
  for (int32_t& t : tokens) t = pick_frequent(gen) ? frequent : any(gen);
  gpt::Tensor shape;
  shape.shape = {B, T};
  Pair p{b.make_cpu_like(shape, gpt::DType::kI32), b.make_like(shape, gpt::DType::kI32)};
  b.cpu.upload(p.cpu, tokens.data());
  b.gpu.upload(p.gpu, tokens.data());
  return p;
}

bool same_bits(Backends& b, const Pair& p) {
  return b.host<float>(b.cpu, p.cpu) == b.host<float>(b.gpu, p.gpu);
}

// max |gpu - cpu| / max(|cpu|, 1): relative error, absolute for values below one.
double max_error(Backends& b, const Pair& p) {
  const std::vector<float> want = b.host<float>(b.cpu, p.cpu), got = b.host<float>(b.gpu, p.gpu);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / std::max(1.0, std::fabs(double(want[i]))));
  return worst;
}

// The CPU's values of p uploaded to its GPU tensor too.
void sync_to_cpu(Backends& b, const Pair& p) {
  b.gpu.upload(p.gpu, b.host<float>(b.cpu, p.cpu).data());
}

void check_embedding(int B, int T, int C, int vocab, double frequent_share) {
  INFO("B " << B << " T " << T << " C " << C << " V " << vocab);
  Backends b;
  const int maxT = T + 3;
  Pair tokens = make_tokens(b, B, T, vocab, vocab / 3, frequent_share, 7);
  Pair wte = b.make(random_values(size_t(vocab) * C, 1), {vocab, C});
  Pair wpe = b.make(random_values(size_t(maxT) * C, 2), {maxT, C});
  Pair out = b.make(std::vector<float>(size_t(B) * T * C), {B, T, C});
  b.cpu.embedding_forward(out.cpu, tokens.cpu, wte.cpu, wpe.cpu);
  b.gpu.embedding_forward(out.gpu, tokens.gpu, wte.gpu, wpe.gpu);
  CHECK(same_bits(b, out));

  // The gradients accumulate into what is there: wte and wpe serve as the starting values.
  Pair dout = b.make(random_values(size_t(B) * T * C, 3), {B, T, C});
  b.cpu.embedding_backward(wte.cpu, wpe.cpu, dout.cpu, tokens.cpu);
  b.gpu.embedding_backward(wte.gpu, wpe.gpu, dout.gpu, tokens.gpu);
  CHECK(same_bits(b, wte));
  CHECK(same_bits(b, wpe));
  // Either gradient may be absent.
  b.cpu.embedding_backward(wte.cpu, gpt::Tensor{}, dout.cpu, tokens.cpu);
  b.gpu.embedding_backward(wte.gpu, gpt::Tensor{}, dout.gpu, tokens.gpu);
  b.cpu.embedding_backward(gpt::Tensor{}, wpe.cpu, dout.cpu, tokens.cpu);
  b.gpu.embedding_backward(gpt::Tensor{}, wpe.gpu, dout.gpu, tokens.gpu);
  CHECK(same_bits(b, wte));
  CHECK(same_bits(b, wpe));
}

void check_layernorm(int N, int C) {
  INFO("N " << N << " C " << C);
  Backends b;
  std::vector<float> xs = random_values(size_t(N) * C, 11);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 3.0f + 2.0f * xs[i] + float(i % 5);  // offset rows
  Pair x = b.make(xs, {N, C});
  Pair w = b.make(random_values(C, 12), {C}), bias = b.make(random_values(C, 13), {C});
  Pair out = b.make(std::vector<float>(size_t(N) * C), {N, C});
  Pair mean = b.make(std::vector<float>(N), {N}), rstd = b.make(std::vector<float>(N), {N});
  b.cpu.layernorm_forward(out.cpu, mean.cpu, rstd.cpu, x.cpu, w.cpu, bias.cpu);
  b.gpu.layernorm_forward(out.gpu, mean.gpu, rstd.gpu, x.gpu, w.gpu, bias.gpu);
  CHECK(max_error(b, out) <= kTolerance);
  CHECK(max_error(b, mean) <= kTolerance);
  CHECK(max_error(b, rstd) <= kTolerance);

  // The backward from the same statistics on both sides, accumulating into random starting values.
  sync_to_cpu(b, mean);
  sync_to_cpu(b, rstd);
  const std::vector<float> dx0 = random_values(size_t(N) * C, 14), dw0 = random_values(C, 15),
                           db0 = random_values(C, 16);
  Pair dout = b.make(random_values(size_t(N) * C, 17), {N, C});
  Pair dx = b.make(dx0, {N, C}), dw = b.make(dw0, {C}), db = b.make(db0, {C});
  b.cpu.layernorm_backward(dx.cpu, dw.cpu, db.cpu, dout.cpu, x.cpu, w.cpu, mean.cpu, rstd.cpu);
  b.gpu.layernorm_backward(dx.gpu, dw.gpu, db.gpu, dout.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu);
  CHECK(max_error(b, dx) <= kTolerance);
  CHECK(max_error(b, dw) <= kTolerance);
  CHECK(max_error(b, db) <= kTolerance);

  // A rerun repeats every bit (no atomics, fixed reduction order).
  const std::vector<float> dx1 = b.host<float>(b.gpu, dx.gpu), dw1 = b.host<float>(b.gpu, dw.gpu),
                           db1 = b.host<float>(b.gpu, db.gpu);
  b.gpu.upload(dx.gpu, dx0.data());
  b.gpu.upload(dw.gpu, dw0.data());
  b.gpu.upload(db.gpu, db0.data());
  b.gpu.layernorm_backward(dx.gpu, dw.gpu, db.gpu, dout.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu);
  CHECK(b.host<float>(b.gpu, dx.gpu) == dx1);
  CHECK(b.host<float>(b.gpu, dw.gpu) == dw1);
  CHECK(b.host<float>(b.gpu, db.gpu) == db1);
}

void check_dropout(int B, int64_t n, double p) {
  INFO("B " << B << " n " << n << " p " << p);
  Backends b;
  std::mt19937_64 gen(uint64_t(B) * 1000 + uint64_t(n));
  std::vector<uint64_t> keys(B);
  for (uint64_t& key : keys) key = gen();
  const gpt::DropoutMask mask{p, keys.data()};
  Pair x = b.make(random_values(size_t(B) * n, 21), {B, n});
  Pair out = b.make(std::vector<float>(size_t(B) * n), {B, n});
  b.cpu.dropout_forward(out.cpu, x.cpu, mask);
  b.gpu.dropout_forward(out.gpu, x.gpu, mask);
  CHECK(same_bits(b, out));
  b.cpu.dropout_backward(x.cpu, out.cpu, mask);  // not in place
  b.gpu.dropout_backward(x.gpu, out.gpu, mask);
  CHECK(same_bits(b, x));
  b.cpu.dropout_forward(out.cpu, out.cpu, mask);  // in place
  b.gpu.dropout_forward(out.gpu, out.gpu, mask);
  CHECK(same_bits(b, out));
}

}  // namespace

TEST_CASE("CudaOps embedding forward and backward equal CpuOps bit for bit") {
  if (!have_device()) return;
  check_embedding(3, 17, 64, 40, 0.5);      // 16-byte path, a token run of about 25
  check_embedding(3, 17, 30, 40, 0.5);      // scalar path
  check_embedding(4, 256, 768, 2000, 0.4);  // GPT-2's width, a run of about 400
}

TEST_CASE("CudaOps LayerNorm agrees with CpuOps within fp32 tolerance and repeats bit for bit") {
  if (!have_device()) return;
  check_layernorm(20, 768);  // one chunk of dweight/dbias rows
  check_layernorm(37, 50);   // scalar path, a partial block of rows
  check_layernorm(300, 768);
  check_layernorm(301, 33);
}

TEST_CASE("CudaOps dropout masks equal CpuOps bit for bit") {
  if (!have_device()) return;
  check_dropout(3, 1000, 0.1);  // 16-byte path
  check_dropout(3, 999, 0.1);   // scalar path
  check_dropout(70, 12, 0.5);   // more sequences than one launch's keys
  check_dropout(2, 64, 0.0);    // a copy
  check_dropout(2, 64, 1.0);    // all dropped
}
