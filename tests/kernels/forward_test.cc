// Float forwards of the CPU kernels against the naive double references (reference.h), on a tiny shape and on
// one large enough for Eigen's blocked GEMM paths; plus the structural promises of attention (causality, rows
// summing to 1) and cross-entropy (padding is zero, in-place use works).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "tests/kernels/check.h"
#include "tests/kernels/reference.h"

namespace gpt::test {
namespace {

using namespace gpt::cpu;
using Vec = std::vector<double>;

struct Shape {
  int B, T, C, NH, V, Vp, OC;
};
constexpr Shape kShapes[] = {{2, 5, 8, 2, 11, 16, 12}, {2, 48, 96, 4, 1000, 1024, 384}};
constexpr double kTol = 2e-5;  // float rounding of sums of up to a few hundred O(1) terms

// Random doubles that are exactly representable as floats, so both sides see the same inputs.
Vec floats(Rng& rng, int64_t n, double lo = -1, double hi = 1) {
  return to_double(to_float(rng.vec(n, lo, hi)));
}

TEST_CASE("float embedding forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    const int N = s.B * s.T;
    Rng rng(11);
    const Vec wte = floats(rng, int64_t(s.Vp) * s.C), wpe = floats(rng, int64_t(s.T + 3) * s.C);
    const auto tokens = rng.tokens(N, s.V);
    std::vector<float> out(int64_t(N) * s.C);
    embedding_forward(out.data(), tokens.data(), to_float(wte).data(), to_float(wpe).data(), s.B, s.T, s.C);
    expect_close("embedding", out, ref::embedding(tokens, wte, wpe, s.B, s.T, s.C), kTol, kTol);
  }
}

TEST_CASE("float layernorm forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    const int N = s.B * s.T;
    Rng rng(11);
    const Vec inp = floats(rng, int64_t(N) * s.C, -3, 5), w = floats(rng, s.C, 0.5, 1.5),
              b = floats(rng, s.C);
    std::vector<float> out(inp.size()), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), to_float(inp).data(), to_float(w).data(),
                      to_float(b).data(), N, s.C);
    expect_close("layernorm", out, ref::layernorm(inp, w, b, N, s.C), kTol, kTol);
  }
}

TEST_CASE("float linear forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    const int N = s.B * s.T;
    Rng rng(11);
    const Vec inp = floats(rng, int64_t(N) * s.C), w = floats(rng, int64_t(s.OC) * s.C),
              b = floats(rng, s.OC);
    std::vector<float> out(int64_t(N) * s.OC);
    linear_forward(out.data(), to_float(inp).data(), to_float(w).data(), to_float(b).data(), N, s.C, s.OC);
    expect_close("linear", out, ref::linear(inp, w, &b, N, s.C, s.OC), kTol, kTol);
    linear_forward<float>(out.data(), to_float(inp).data(), to_float(w).data(), nullptr, N, s.C, s.OC);
    expect_close("linear without bias", out, ref::linear(inp, w, nullptr, N, s.C, s.OC), kTol, kTol);
  }
}

TEST_CASE("float attention forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    const int N = s.B * s.T;
    Rng rng(11);
    const Vec qkv = floats(rng, int64_t(N) * 3 * s.C, -2, 2);
    Vec att_ref;
    const Vec out_ref = ref::attention(att_ref, qkv, s.B, s.T, s.C, s.NH);
    std::vector<float> out(int64_t(N) * s.C), att(int64_t(s.B) * s.NH * s.T * s.T, -1.f);
    attention_forward(out.data(), att.data(), to_float(qkv).data(), s.B, s.T, s.C, s.NH);
    expect_close("attention out", out, out_ref, kTol, kTol);
    expect_close("attention probabilities", att, att_ref, kTol, kTol);
  }
}

TEST_CASE("float gelu forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    const int N = s.B * s.T;
    Rng rng(11);
    const Vec inp = floats(rng, int64_t(N) * s.C, -8, 8);
    std::vector<float> out(inp.size());
    gelu_forward(out.data(), to_float(inp).data(), int64_t(inp.size()));
    expect_close("gelu", out, ref::gelu(inp), kTol, kTol);
  }
}

TEST_CASE("float residual forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    Rng rng(11);
    const Vec a = floats(rng, int64_t(s.B) * s.T * s.C), b = floats(rng, int64_t(s.B) * s.T * s.C);
    std::vector<float> out(a.size());
    residual_forward(out.data(), to_float(a).data(), to_float(b).data(), int64_t(a.size()));
    Vec sum(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
    expect_close("residual", out, sum, 1e-7, 0);
  }
}

TEST_CASE("float cross-entropy forward matches the naive reference") {
  for (const Shape& s : kShapes) {
    CAPTURE(s.C);
    const int N = s.B * s.T;
    Rng rng(11);
    const Vec logits = floats(rng, int64_t(N) * s.Vp, -6, 6);
    const auto targets = rng.tokens(N, s.V);
    Vec probs_ref;
    const Vec losses_ref = ref::cross_entropy(probs_ref, logits, targets, N, s.V, s.Vp);
    std::vector<float> losses(N), probs(logits.size(), -1.f);
    softmax_cross_entropy_forward(losses.data(), probs.data(), to_float(logits).data(), targets.data(), N,
                                  s.V, s.Vp);
    expect_close("losses", losses, losses_ref, kTol, kTol);
    expect_close("probs", probs, probs_ref, kTol, 1e-7);
  }
}

// The normalizer of a 50304-wide row is a sum of 50257 exponentials: summed in one chain per vector lane it
// carried 2.6e-6 (AVX-512) to 5.9e-6 (AVX2) of relative error into every probability here, 1.7e-5 over the
// GPU check's 4096 rows, where the GPU's tree of 512 partial sums gave 3e-7 (bench/results/gpu_check.md).
TEST_CASE("float cross-entropy over GPT-2's vocabulary keeps the normalizer accurate") {
  constexpr int N = 256, V = 50257, Vp = 50304;
  std::mt19937_64 gen(29);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(int64_t(N) * Vp);
  for (float& z : logits) z = normal(gen);
  Rng rng(12);
  const auto targets = rng.tokens(N, V);
  Vec probs_ref;
  ref::cross_entropy(probs_ref, to_double(logits), targets, N, V, Vp);
  std::vector<float> losses(N), probs(logits.size());
  softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    worst = std::max(worst, std::fabs(probs[i] - probs_ref[i]));
    largest = std::max(largest, std::fabs(probs_ref[i]));
  }
  CHECK(worst / largest <= 1e-6);  // measured: 4.3e-7 (AVX-512), 3.3e-7 (AVX2)
}

TEST_CASE("attention is causal and its rows are distributions") {
  constexpr int B = 2, T = 9, C = 16, NH = 4;
  Rng rng(12);
  auto qkv = to_float(rng.vec(int64_t(B) * T * 3 * C, -2, 2));
  std::vector<float> out(int64_t(B) * T * C), att(int64_t(B) * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      double sum = 0;
      for (int j = 0; j < T; ++j) {
        const float a = att[(int64_t(bh) * T + t) * T + j];
        if (j > t) CHECK(a == 0.f);
        CHECK(a >= 0.f);
        sum += a;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    }
  // Changing q, k, v at positions > t0 changes nothing at positions <= t0.
  constexpr int t0 = 4;
  auto changed = qkv;
  for (int b = 0; b < B; ++b)
    for (int t = t0 + 1; t < T; ++t)
      for (int i = 0; i < 3 * C; ++i) changed[(int64_t(b) * T + t) * 3 * C + i] += 1.5f;
  std::vector<float> out2(out.size()), att2(att.size());
  attention_forward(out2.data(), att2.data(), changed.data(), B, T, C, NH);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t <= t0; ++t)
      for (int i = 0; i < C; ++i)
        CHECK(out2[(int64_t(b) * T + t) * C + i] == out[(int64_t(b) * T + t) * C + i]);
}

TEST_CASE("cross-entropy leaves the padding at zero and works in place") {
  constexpr int N = 6, V = 50, Vp = 64;
  Rng rng(13);
  const auto logits = to_float(rng.vec(int64_t(N) * Vp, -4, 4));
  const auto targets = rng.tokens(N, V);
  const auto dlosses = to_float(rng.vec(N, 0.1, 1));
  std::vector<float> losses(N), probs(logits.size(), 7.f), dlogits(logits.size(), 7.f);
  softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), dlosses.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) {
    double sum = 0;
    for (int j = 0; j < Vp; ++j) {
      if (j >= V) {
        CHECK(probs[int64_t(n) * Vp + j] == 0.f);
        CHECK(dlogits[int64_t(n) * Vp + j] == 0.f);
      }
      sum += probs[int64_t(n) * Vp + j];
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
  }
  // The model keeps one [N,Vp] buffer: logits -> probs -> dlogits in place.
  auto buffer = logits;
  std::vector<float> losses2(N);
  softmax_cross_entropy_forward(losses2.data(), buffer.data(), buffer.data(), targets.data(), N, V, Vp);
  CHECK(losses2 == losses);
  CHECK(buffer == probs);
  softmax_cross_entropy_backward(buffer.data(), buffer.data(), targets.data(), dlosses.data(), N, V, Vp);
  CHECK(buffer == dlogits);
}

}  // namespace
}  // namespace gpt::test
