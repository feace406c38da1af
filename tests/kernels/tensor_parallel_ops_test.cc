// The device-seam ops of tensor parallelism on the CPU backend, against the whole-model ops they split: a
// vocabulary of Vp = 256 (V = 250, and V = 100, where whole slices are padding) over G = 1, 2 and 4 ranks.
//   - the vocabulary-parallel embedding: the slices' outputs sum to embedding_forward's bit for bit, and
//     their weight gradients are embedding_backward's rows bit for bit;
//   - the vocabulary-parallel cross-entropy (stats, merge over the gathered stats, backward on columns):
//     losses, probabilities and logit gradients within 1e-6 of the whole row's (one slice: bit for bit);
//   - dropout's element offset: a slice of a row, or attention over heads [2, 4) of 4, draws the masks the
//     whole tensor draws there, so outputs, probabilities and gradients equal the whole op's bit for bit.
// fp32 and fp64, and the same bits at 1 and 3 threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "tensor/tensor.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

constexpr int kVp = 256;
constexpr int kV = 250;
const std::vector<uint64_t> kKeys = {0x51ed270b27ULL, 0x9e3779b97f4a7c15ULL, 7};

// Host memory for a seam tensor: 64-byte aligned (a Buffer), so a slice of a tensor and the whole tensor
// sit at the same alignment and Eigen takes the same code paths for both.
template <typename T>
class Host {
 public:
  explicit Host(int64_t n) : buffer_(sizeof(T) * size_t(std::max<int64_t>(n, 1))), size_(n) {}
  explicit Host(const std::vector<T>& values) : Host(int64_t(values.size())) {
    std::copy(values.begin(), values.end(), data());
  }
  T* data() const { return buffer_.as<T>(); }
  T& operator[](int64_t i) const { return data()[i]; }
  int64_t size() const { return size_; }
  std::vector<T> values() const { return std::vector<T>(data(), data() + size_); }
  Tensor tensor(std::vector<int64_t> shape) const { return buffer_.view(std::move(shape), dtype_of<T>()); }

 private:
  Buffer buffer_;
  int64_t size_;
};

template <typename Real>
std::vector<Real> random_values(Rng& rng, int64_t n, double scale = 1.0) {
  std::vector<Real> v(n);
  for (Real& x : v) x = Real(rng.uniform(-scale, scale));
  return v;
}

// Columns [first, first + W) of the [rows, cols] matrix m.
template <typename T>
std::vector<T> columns(const std::vector<T>& m, int64_t rows, int64_t cols, int64_t first, int64_t W) {
  std::vector<T> out(rows * W);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(m.begin() + r * cols + first, m.begin() + r * cols + first + W, out.begin() + r * W);
  return out;
}

// Puts [rows, W] into columns [first, first + W) of the [rows, cols] matrix m.
template <typename T>
void put_columns(std::vector<T>& m, int64_t rows, int64_t cols, int64_t first, int64_t W,
                 const std::vector<T>& part) {
  for (int64_t r = 0; r < rows; ++r)
    std::copy(part.begin() + r * W, part.begin() + (r + 1) * W, m.begin() + r * cols + first);
}

// Tokens below V, with repeats (the gradient sums of one wte row) and each slice's first and last rows.
std::vector<int32_t> test_tokens(Rng& rng, int n, int vocab) {
  std::vector<int32_t> tokens = rng.tokens(n, vocab);
  const int32_t fixed[] = {0, 63, 64, 127, 128, 191, 192, int32_t(vocab - 1)};
  for (int i = 0; i < 8 && 3 * i + 1 < n; ++i) tokens[3 * i + 1] = std::min(fixed[i], int32_t(vocab - 1));
  tokens[n - 1] = tokens[0];
  tokens[n - 2] = tokens[0];
  return tokens;
}

// Restores the thread count a test changed.
struct ThreadsGuard {
  int before = cpu::num_threads();
  ~ThreadsGuard() { cpu::set_num_threads(before); }
};

// ---- the vocabulary-parallel embedding ----------------------------------------------------------------

constexpr int kB = 3, kT = 16, kC = 32, kMaxT = 20;

template <typename Real>
struct EmbeddingData {
  Rng rng{101};
  std::vector<int32_t> tokens = test_tokens(rng, kB* kT, kV);
  std::vector<Real> wte = random_values<Real>(rng, int64_t(kVp) * kC);
  std::vector<Real> wpe = random_values<Real>(rng, int64_t(kMaxT) * kC);
  std::vector<Real> dout = random_values<Real>(rng, int64_t(kB) * kT * kC);
  std::vector<Real> dwte0 = random_values<Real>(rng, int64_t(kVp) * kC);  // accumulated into
  std::vector<Real> dwpe0 = random_values<Real>(rng, int64_t(kMaxT) * kC);
};

// The G slices' outputs summed in rank order (wpe on slice 0 only), and their weight gradients concatenated,
// with the position gradient from slice 0.
template <typename Real>
struct SlicedEmbedding {
  std::vector<Real> out, dwte, dwpe;
};

template <typename Real>
SlicedEmbedding<Real> run_sliced_embedding(Ops& ops, const EmbeddingData<Real>& d, int G) {
  const int64_t R = kVp / G;
  const Host<int32_t> tokens(d.tokens);
  const Host<Real> wpe(d.wpe), dout(d.dout), dwpe(d.dwpe0);
  SlicedEmbedding<Real> r{std::vector<Real>(int64_t(kB) * kT * kC, Real(0)), {}, {}};
  for (int g = 0; g < G; ++g) {
    const int64_t first = g * R;
    const Host<Real> wte(std::vector<Real>(d.wte.begin() + first * kC, d.wte.begin() + (first + R) * kC));
    const Host<Real> out(int64_t(kB) * kT * kC);
    const Tensor no_tensor;
    ops.embedding_forward_rows(out.tensor({kB, kT, kC}), tokens.tensor({kB, kT}), wte.tensor({R, kC}), first,
                               g == 0 ? wpe.tensor({kMaxT, kC}) : no_tensor);
    for (int64_t i = 0; i < out.size(); ++i) r.out[i] = g == 0 ? out[i] : r.out[i] + out[i];
    const Host<Real> dwte(
        std::vector<Real>(d.dwte0.begin() + first * kC, d.dwte0.begin() + (first + R) * kC));
    ops.embedding_backward_rows(dwte.tensor({R, kC}), first, g == 0 ? dwpe.tensor({kMaxT, kC}) : no_tensor,
                                dout.tensor({kB, kT, kC}), tokens.tensor({kB, kT}));
    const std::vector<Real> part = dwte.values();
    r.dwte.insert(r.dwte.end(), part.begin(), part.end());
  }
  r.dwpe = dwpe.values();
  return r;
}

TEST_CASE_TEMPLATE("the vocabulary-parallel embedding sums to the whole embedding bit for bit", Real, float,
                   double) {
  CpuOps& ops = cpu_ops();
  const EmbeddingData<Real> d;
  const Host<int32_t> tokens(d.tokens);
  const Host<Real> wte(d.wte), wpe(d.wpe), dout(d.dout), out(int64_t(kB) * kT * kC);
  const Host<Real> dwte(d.dwte0), dwpe(d.dwpe0);
  ops.embedding_forward(out.tensor({kB, kT, kC}), tokens.tensor({kB, kT}), wte.tensor({kVp, kC}),
                        wpe.tensor({kMaxT, kC}));
  ops.embedding_backward(dwte.tensor({kVp, kC}), dwpe.tensor({kMaxT, kC}), dout.tensor({kB, kT, kC}),
                         tokens.tensor({kB, kT}));
  for (int G : {1, 2, 4}) {
    CAPTURE(G);
    const SlicedEmbedding<Real> sliced = run_sliced_embedding(ops, d, G);
    CHECK(sliced.out == out.values());
    CHECK(sliced.dwte == dwte.values());
    CHECK(sliced.dwpe == dwpe.values());
  }
  // A slice without wpe and without the token writes exact zeros; with neither, wte's row alone.
  const Host<Real> slice_out(int64_t(kB) * kT * kC);
  ops.embedding_forward_rows(slice_out.tensor({kB, kT, kC}), tokens.tensor({kB, kT}), wte.tensor({64, kC}),
                             64, Tensor());
  for (int bt = 0; bt < kB * kT; ++bt) {
    const int32_t tok = d.tokens[bt];
    const bool held = tok >= 64 && tok < 128;
    for (int c = 0; c < kC; ++c) {
      const Real want = held ? d.wte[int64_t(tok - 64) * kC + c] : Real(0);
      if (slice_out[int64_t(bt) * kC + c] != want) FAIL("bt " << bt << " c " << c);
    }
  }
  CHECK_THROWS_AS(ops.embedding_forward_rows(slice_out.tensor({kB, kT, kC}), tokens.tensor({kB, kT}),
                                             wte.tensor({64, kC}), -1, Tensor()),
                  std::invalid_argument);
  CHECK_THROWS_AS(ops.embedding_backward_rows(dwte.tensor({64, kC}), 0, wpe.tensor({kT - 1, kC}),
                                              dout.tensor({kB, kT, kC}), tokens.tensor({kB, kT})),
                  std::invalid_argument);  // wpe shorter than the sequence
}

// ---- the vocabulary-parallel cross-entropy ------------------------------------------------------------

constexpr int kN = 40;

template <typename Real>
struct LossData {
  explicit LossData(int vocab) : vocab(vocab) {
    Rng rng(202 + vocab);
    logits = random_values<Real>(rng, int64_t(kN) * kVp, 4.0);
    for (int n = 0; n < kN; ++n)  // the padding must be ignored: make it dominate if it were not
      for (int j = vocab; j < kVp; ++j) logits[int64_t(n) * kVp + j] = Real(50);
    targets = rng.tokens(kN, vocab);
    targets[0] = 0;
    targets[1] = vocab - 1;
    targets[2] = 63;
    targets[3] = 64;
    dlosses = random_values<Real>(rng, kN);
  }
  int vocab;
  std::vector<Real> logits, dlosses;
  std::vector<int32_t> targets;
};

template <typename Real>
struct LossResult {
  std::vector<Real> losses, probs, dlogits;
};

template <typename Real>
LossResult<Real> run_whole_loss(Ops& ops, const LossData<Real>& d) {
  const Host<Real> logits(d.logits), probs(int64_t(kN) * kVp), losses(kN), dlosses(d.dlosses);
  const Host<Real> dlogits(int64_t(kN) * kVp);
  const Host<int32_t> targets(d.targets);
  ops.cross_entropy_forward(losses.tensor({kN}), probs.tensor({kN, kVp}), logits.tensor({kN, kVp}),
                            targets.tensor({kN}), d.vocab);
  ops.cross_entropy_backward(dlogits.tensor({kN, kVp}), probs.tensor({kN, kVp}), targets.tensor({kN}),
                             dlosses.tensor({kN}), d.vocab);
  return {losses.values(), probs.values(), dlogits.values()};
}

// Every rank's stats into the gathered [G, N, 3], then each rank's merge (in place on odd ranks, as the
// model may run it) and backward; the probabilities and gradients put back into whole [N, Vp] rows. The
// losses are rank 0's, after checking that every rank computed the same bits.
template <typename Real>
LossResult<Real> run_sliced_loss(Ops& ops, const LossData<Real>& d, int G) {
  const int64_t W = kVp / G;
  const Host<int32_t> targets(d.targets);
  const Host<Real> dlosses(d.dlosses), stats(int64_t(G) * kN * 3);
  std::vector<Host<Real>> logits;
  for (int g = 0; g < G; ++g) {
    logits.emplace_back(columns(d.logits, kN, kVp, g * W, W));
    const Tensor rank_stats{stats.data() + int64_t(g) * kN * 3, {kN, 3}, dtype_of<Real>(), Device::kCPU};
    ops.cross_entropy_stats(rank_stats, logits[g].tensor({kN, W}), targets.tensor({kN}), g * W, d.vocab);
  }
  LossResult<Real> r{{}, std::vector<Real>(int64_t(kN) * kVp), std::vector<Real>(int64_t(kN) * kVp)};
  for (int g = 0; g < G; ++g) {
    const Host<Real> separate(kN * W), losses(kN), dlogits(kN * W);
    const Host<Real>& probs = g % 2 == 1 ? logits[g] : separate;
    ops.cross_entropy_merge(losses.tensor({kN}), probs.tensor({kN, W}), logits[g].tensor({kN, W}),
                            stats.tensor({G, kN, 3}), g * W, d.vocab);
    ops.cross_entropy_backward_columns(dlogits.tensor({kN, W}), probs.tensor({kN, W}), targets.tensor({kN}),
                                       dlosses.tensor({kN}), g * W, d.vocab);
    if (g == 0) r.losses = losses.values();
    CHECK(losses.values() == r.losses);
    put_columns(r.probs, kN, kVp, g * W, W, probs.values());
    put_columns(r.dlogits, kN, kVp, g * W, W, dlogits.values());
  }
  return r;
}

TEST_CASE_TEMPLATE("the vocabulary-parallel cross-entropy matches the whole row's", Real, float, double) {
  CpuOps& ops = cpu_ops();
  for (int vocab : {kV, 100}) {
    CAPTURE(vocab);
    const LossData<Real> d(vocab);
    const LossResult<Real> whole = run_whole_loss(ops, d);
    for (int G : {1, 2, 4}) {
      CAPTURE(G);
      const LossResult<Real> sliced = run_sliced_loss(ops, d, G);
      expect_close("losses", sliced.losses, whole.losses, 1e-6, 0.0);
      expect_close("probs", sliced.probs, whole.probs, 1e-6, 0.0);
      expect_close("dlogits", sliced.dlogits, whole.dlogits, 1e-6, 0.0);
      if (G == 1) {  // one slice over the whole row is the whole op's arithmetic
        CHECK(sliced.losses == whole.losses);
        CHECK(sliced.probs == whole.probs);
        CHECK(sliced.dlogits == whole.dlogits);
      }
    }
  }
}

TEST_CASE("cross_entropy_stats: padding-only slices, the target's slice, and bad shapes") {
  CpuOps& ops = cpu_ops();
  const LossData<float> d(100);
  const int64_t W = 64;
  const Host<int32_t> targets(d.targets);
  for (int g = 0; g < 4; ++g) {
    CAPTURE(g);
    const Host<float> logits(columns(d.logits, kN, kVp, g * W, W)), stats(kN * 3);
    ops.cross_entropy_stats(stats.tensor({kN, 3}), logits.tensor({kN, W}), targets.tensor({kN}), g * W, 100);
    for (int n = 0; n < kN; ++n) {
      const int64_t real = std::clamp<int64_t>(100 - g * W, 0, W);
      const int64_t local = d.targets[n] - g * W;
      const float want_target = local >= 0 && local < W ? logits[n * W + local] : 0.0f;
      CHECK(stats[n * 3 + 2] == want_target);
      if (real == 0) {
        CHECK(stats[n * 3] == -std::numeric_limits<float>::infinity());
        CHECK(stats[n * 3 + 1] == 0.0f);
      } else {
        const float* z = logits.data() + n * W;
        CHECK(stats[n * 3] == *std::max_element(z, z + real));
        CHECK(stats[n * 3 + 1] >= 1.0f);
        CHECK(stats[n * 3 + 1] <= float(real));
      }
    }
  }
  const Host<float> logits(kN * W), stats(kN * 3);
  CHECK_THROWS_AS(
      ops.cross_entropy_stats(stats.tensor({kN, 2}), logits.tensor({kN, W}), targets.tensor({kN}), 0, 100),
      std::invalid_argument);
  CHECK_THROWS_AS(
      ops.cross_entropy_stats(stats.tensor({kN, 3}), logits.tensor({kN, W}), targets.tensor({kN}), -64, 100),
      std::invalid_argument);
  const Host<double> wrong_dtype(kN * 3);
  CHECK_THROWS_AS(ops.cross_entropy_stats(wrong_dtype.tensor({kN, 3}), logits.tensor({kN, W}),
                                          targets.tensor({kN}), 0, 100),
                  std::invalid_argument);
}

// ---- dropout's element offset -------------------------------------------------------------------------

template <typename Real>
void check_dropout_slice() {
  CpuOps& ops = cpu_ops();
  constexpr int B = 3;
  constexpr int64_t n = 2 * 1000 + 34, half = n / 2;
  Rng rng(303);
  const Host<Real> x(random_values<Real>(rng, B * n)), whole(B * n), dwhole(B * n);
  const Host<Real> x_half(columns(x.values(), B, n, half, n - half)), part(B * (n - half)),
      dpart(B * (n - half));
  const DropoutMask mask{0.3, kKeys.data()};
  const DropoutMask offset_mask{0.3, kKeys.data(), half};
  ops.dropout_forward(whole.tensor({B, n}), x.tensor({B, n}), mask);
  ops.dropout_backward(dwhole.tensor({B, n}), x.tensor({B, n}), mask);
  ops.dropout_forward(part.tensor({B, n - half}), x_half.tensor({B, n - half}), offset_mask);
  ops.dropout_backward(dpart.tensor({B, n - half}), x_half.tensor({B, n - half}), offset_mask);
  CHECK(part.values() == columns(whole.values(), B, n, half, n - half));
  CHECK(dpart.values() == columns(dwhole.values(), B, n, half, n - half));
  // Without the offset the slice would draw the first half's mask: a different one.
  ops.dropout_forward(part.tensor({B, n - half}), x_half.tensor({B, n - half}), mask);
  CHECK(part.values() != columns(whole.values(), B, n, half, n - half));
}

TEST_CASE_TEMPLATE("dropout of a row's second half with element_offset = half is the row's second half", Real,
                   float, double) {
  check_dropout_slice<Real>();
}

// Heads [h0, h0 + NHl) of a fused qkv [B, T, 3C]: the same columns of q, k and v, as a column-parallel qkv
// linear leaves them on a tensor-parallel rank.
template <typename Real>
std::vector<Real> qkv_heads(const std::vector<Real>& qkv, int B, int T, int C, int hs, int h0, int NHl) {
  const int Cl = NHl * hs;
  std::vector<Real> out(int64_t(B) * T * 3 * Cl);
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt)
    for (int part = 0; part < 3; ++part)
      for (int c = 0; c < Cl; ++c)
        out[bt * 3 * Cl + part * Cl + c] = qkv[bt * 3 * C + part * C + h0 * hs + c];
  return out;
}

template <typename Real>
void check_attention_heads(bool drop) {
  CpuOps& ops = cpu_ops();
  constexpr int B = 2, T = 24, NH = 4, hs = 16, C = NH * hs, h0 = 2, NHl = 2, Cl = NHl * hs;
  Rng rng(404);
  const std::vector<Real> qkv_values = random_values<Real>(rng, int64_t(B) * T * 3 * C, 1.5);
  const std::vector<Real> dout_values = random_values<Real>(rng, int64_t(B) * T * C);
  const DropoutMask mask{drop ? 0.2 : 0.0, kKeys.data()};
  const DropoutMask offset_mask{mask.p, kKeys.data(), int64_t(h0) * T * T};

  const Host<Real> qkv(qkv_values), dout(dout_values), out(int64_t(B) * T * C), att(int64_t(B) * NH * T * T);
  const Host<Real> dqkv(int64_t(B) * T * 3 * C);
  ops.attention_forward(out.tensor({B, T, C}), att.tensor({B, NH, T, T}), qkv.tensor({B, T, 3 * C}), &mask);
  ops.attention_backward(dqkv.tensor({B, T, 3 * C}), dout.tensor({B, T, C}), qkv.tensor({B, T, 3 * C}),
                         out.tensor({B, T, C}), att.tensor({B, NH, T, T}), &mask);

  const Host<Real> qkv_l(qkv_heads(qkv_values, B, T, C, hs, h0, NHl));
  const Host<Real> dout_l(columns(dout_values, int64_t(B) * T, C, h0 * hs, Cl));
  const Host<Real> out_l(int64_t(B) * T * Cl), att_l(int64_t(B) * NHl * T * T),
      dqkv_l(int64_t(B) * T * 3 * Cl);
  ops.attention_forward(out_l.tensor({B, T, Cl}), att_l.tensor({B, NHl, T, T}), qkv_l.tensor({B, T, 3 * Cl}),
                        &offset_mask);
  ops.attention_backward(dqkv_l.tensor({B, T, 3 * Cl}), dout_l.tensor({B, T, Cl}),
                         qkv_l.tensor({B, T, 3 * Cl}), out_l.tensor({B, T, Cl}), att_l.tensor({B, NHl, T, T}),
                         &offset_mask);

  CHECK(out_l.values() == columns(out.values(), int64_t(B) * T, C, h0 * hs, Cl));
  // att [B, NH, T*T]: heads h0.. of each sequence.
  CHECK(att_l.values() ==
        columns(att.values(), B, int64_t(NH) * T * T, int64_t(h0) * T * T, int64_t(NHl) * T * T));
  CHECK(dqkv_l.values() == qkv_heads(dqkv.values(), B, T, C, hs, h0, NHl));
  if (drop) {  // without the offset, the rank would draw heads 0 and 1's masks
    ops.attention_forward(out_l.tensor({B, T, Cl}), att_l.tensor({B, NHl, T, T}),
                          qkv_l.tensor({B, T, 3 * Cl}), &mask);
    CHECK(out_l.values() != columns(out.values(), int64_t(B) * T, C, h0 * hs, Cl));
  }
}

TEST_CASE_TEMPLATE("attention over heads [2, 4) with element_offset = 2*T*T is the whole attention's heads",
                   Real, float, double) {
  SUBCASE("dropout on") {
    check_attention_heads<Real>(true);
  }
  SUBCASE("dropout off") {
    check_attention_heads<Real>(false);
  }
}

// ---- thread counts ------------------------------------------------------------------------------------

TEST_CASE("the tensor-parallel ops give the same bits at 1 and 3 threads") {
  ThreadsGuard guard;
  const EmbeddingData<float> e;
  const LossData<float> l(kV);
  SlicedEmbedding<float> embedding[2];
  LossResult<float> loss[2];
  for (int k = 0; k < 2; ++k) {
    cpu::set_num_threads(k == 0 ? 1 : 3);
    embedding[k] = run_sliced_embedding(cpu_ops(), e, 2);
    loss[k] = run_sliced_loss(cpu_ops(), l, 4);
  }
  CHECK(embedding[0].out == embedding[1].out);
  CHECK(embedding[0].dwte == embedding[1].dwte);
  CHECK(embedding[0].dwpe == embedding[1].dwpe);
  CHECK(loss[0].losses == loss[1].losses);
  CHECK(loss[0].probs == loss[1].probs);
  CHECK(loss[0].dlogits == loss[1].dlogits);
}

}  // namespace
}  // namespace gpt::test
