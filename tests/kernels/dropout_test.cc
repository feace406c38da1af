// Dropout kernels and attention dropout: the p = 0 path is the identity (bitwise), the kept fraction is 1-p,
// masks are a function of (key, element) only, backwards match central differences with the mask fixed
// (dropout is linear given the mask), and results do not depend on the thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/random.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/threads.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

using namespace gpt::cpu;

const std::vector<uint64_t> kKeys = {0x1234567ULL, 0xFEDCBA98ULL, 42};

TEST_CASE("dropout with p = 0 is the identity, in place or not") {
  Rng rng(41);
  const auto x = to_float(rng.vec(3 * 1000));
  std::vector<float> y(x.size(), -1.f);
  dropout_forward(y.data(), x.data(), kKeys.data(), 0.0, 3, 1000);
  CHECK(y == x);
  dropout_forward(y.data(), y.data(), kKeys.data(), 0.0, 3, 1000);
  CHECK(y == x);
  std::vector<float> dx(x.size(), -1.f);
  dropout_backward(dx.data(), x.data(), kKeys.data(), 0.0, 3, 1000);
  CHECK(dx == x);
}

TEST_CASE("dropout keeps a fraction 1-p, scales kept values by 1/(1-p), and follows the uniform32 rule") {
  constexpr int B = 2;
  constexpr int64_t n = int64_t(1) << 20;
  const std::vector<float> x(B * n, 1.5f);
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    std::vector<float> y(x.size());
    dropout_forward(y.data(), x.data(), kKeys.data(), p, B, n);
    const float kept_value = 1.5f * static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0, wrong = 0;
    for (int64_t i = 0; i < B * n; ++i) {
      const bool keep = random::uniform32(kKeys[i / n], uint64_t(i % n)) >= p;
      CHECK(keep == dropout_keep(kKeys[i / n], i % n, p));
      if (keep) ++kept;
      if (y[i] != (keep ? kept_value : 0.f)) ++wrong;
    }
    CHECK(wrong == 0);
    // The kept count is Binomial(2^21, 1-p): 6 standard deviations is a bound no honest generator fails.
    const double N = double(B * n), sigma = std::sqrt(N * p * (1 - p));
    CHECK(std::abs(double(kept) - N * (1 - p)) < 6 * sigma);
  }
  std::vector<float> y(x.size(), 7.f);
  dropout_forward(y.data(), x.data(), kKeys.data(), 1.0, B, n);  // p = 1 drops everything
  CHECK(y == std::vector<float>(x.size(), 0.f));
}

TEST_CASE("a mask depends only on its sequence's key and the element index") {
  constexpr int64_t n = 777;
  Rng rng(42);
  const auto x = to_float(rng.vec(3 * n));
  std::vector<float> all(x.size()), again(x.size());
  dropout_forward(all.data(), x.data(), kKeys.data(), 0.3, 3, n);
  dropout_forward(again.data(), x.data(), kKeys.data(), 0.3, 3, n);
  CHECK(all == again);
  // Sequence 2 alone, with its key, gets the same mask as in the batch of 3.
  std::vector<float> alone(n);
  dropout_forward(alone.data(), x.data() + 2 * n, &kKeys[2], 0.3, 1, n);
  CHECK(alone == std::vector<float>(all.begin() + 2 * n, all.end()));
  // In place equals out of place.
  auto in_place = x;
  dropout_forward(in_place.data(), in_place.data(), kKeys.data(), 0.3, 3, n);
  CHECK(in_place == all);
  // Different keys give different masks (each of 777 elements agrees with probability 0.58).
  int64_t differ = 0;
  for (int64_t e = 0; e < n; ++e) differ += dropout_keep(kKeys[0], e, 0.3) != dropout_keep(kKeys[1], e, 0.3);
  CHECK(differ > n / 5);
}

TEST_CASE("dropout backward matches finite differences with the mask fixed") {
  constexpr int B = 2;
  constexpr int64_t n = 40;
  Rng rng(43);
  auto x = rng.vec(B * n);
  const auto w = rng.vec(B * n);
  std::vector<double> y(x.size());
  auto loss = [&] {
    dropout_forward(y.data(), x.data(), kKeys.data(), 0.25, B, n);
    return dot(w, y);
  };
  std::vector<double> dx(x.size(), 123.0);  // overwritten
  dropout_backward(dx.data(), w.data(), kKeys.data(), 0.25, B, n);
  check_gradient("dropout inp", x, loss, dx);
  int64_t zeros = 0;
  for (double d : dx) zeros += d == 0.0;
  CHECK(zeros > 0);  // some elements were dropped, so the check saw both branches
  CHECK(zeros < B * n);
}

// Attention forward with dropout by scalar loops: out = D V with D = mask o softmax / (1-p), the mask of
// (b, h, i, j) drawn at counter offset + h*T*T + i*T + j of key b.
std::vector<double> naive_dropped_attention(const std::vector<double>& qkv, const uint64_t* keys, double p,
                                            int B, int T, int C, int NH, int64_t offset = 0) {
  const int hs = C / NH;
  std::vector<double> out(int64_t(B) * T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hs; ++c)
            d += qkv[(int64_t(b) * T + i) * 3 * C + h * hs + c] *
                 qkv[(int64_t(b) * T + j) * 3 * C + C + h * hs + c];
          s[j] = d / std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= i; ++j) sum += s[j] = std::exp(s[j] - mx);
        for (int j = 0; j <= i; ++j) {
          const bool keep = dropout_keep(keys[b], offset + int64_t(h) * T * T + int64_t(i) * T + j, p);
          const double a = keep ? s[j] / sum / (1 - p) : 0.0;
          for (int c = 0; c < hs; ++c)
            out[(int64_t(b) * T + i) * C + h * hs + c] +=
                a * qkv[(int64_t(b) * T + j) * 3 * C + 2 * C + h * hs + c];
        }
      }
  return out;
}

TEST_CASE("attention dropout: forward against scalar loops, att keeps the probabilities, gradient check") {
  constexpr int B = 2, T = 6, C = 8, NH = 2;
  Rng rng(44);
  auto qkv = rng.vec(int64_t(B) * T * 3 * C, -1.5, 1.5);
  const auto w = rng.vec(int64_t(B) * T * C);
  const AttentionDropout dropout{0.3, kKeys.data()};
  std::vector<double> out(w.size()), att(int64_t(B) * NH * T * T);
  std::vector<double> plain_out(w.size()), plain_att(att.size());
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, &dropout);
  attention_forward(plain_out.data(), plain_att.data(), qkv.data(), B, T, C, NH);
  CHECK(att == plain_att);  // the probabilities before dropout, for the backward
  CHECK(out != plain_out);
  expect_close("dropped attention", out, naive_dropped_attention(qkv, kKeys.data(), 0.3, B, T, C, NH), 1e-12,
               1e-12);

  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, &dropout);
    return dot(w, out);
  };
  loss();
  const auto dqkv0 = rng.vec(qkv.size());
  auto dqkv = dqkv0;
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH, &dropout);
  check_gradient("qkv with attention dropout", qkv, loss, minus(dqkv, dqkv0));
}

TEST_CASE("an element offset moves the masks: dropout and attention dropout draw at offset + e") {
  constexpr int B = 2, T = 5, C = 8, NH = 2;
  constexpr int64_t offset = 3 * T * T + 7, n = 300;
  Rng rng(47);
  const auto qkv = rng.vec(int64_t(B) * T * 3 * C, -1.5, 1.5);
  const AttentionDropout dropout{0.3, kKeys.data(), offset};
  std::vector<double> out(int64_t(B) * T * C), att(int64_t(B) * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, &dropout);
  expect_close("attention dropped at an offset", out,
               naive_dropped_attention(qkv, kKeys.data(), 0.3, B, T, C, NH, offset), 1e-12, 1e-12);
  CHECK_FALSE(out == naive_dropped_attention(qkv, kKeys.data(), 0.3, B, T, C, NH));

  const auto x = to_float(rng.vec(B * n));
  std::vector<float> y(x.size()), dx(x.size());
  dropout_forward(y.data(), x.data(), kKeys.data(), 0.4, B, n, offset);
  dropout_backward(dx.data(), x.data(), kKeys.data(), 0.4, B, n, offset);
  const float scale = static_cast<float>(1.0 / (1.0 - 0.4));
  int64_t wrong = 0;
  for (int64_t i = 0; i < B * n; ++i) {
    const bool keep = dropout_keep(kKeys[i / n], offset + i % n, 0.4);
    wrong += y[i] != (keep ? x[i] * scale : 0.f);
  }
  CHECK(wrong == 0);
  CHECK(dx == y);
}

TEST_CASE("attention with dropout p = 0 is bitwise the call without dropout") {
  constexpr int B = 2, T = 33, C = 64, NH = 4;
  Rng rng(45);
  const auto qkv = to_float(rng.vec(int64_t(B) * T * 3 * C, -2, 2));
  const auto dy = to_float(rng.vec(int64_t(B) * T * C));
  const AttentionDropout zero{0.0, kKeys.data()};
  std::vector<float> out[2], att[2], dqkv[2];
  for (int k = 0; k < 2; ++k) {
    out[k].resize(dy.size());
    att[k].resize(int64_t(B) * NH * T * T);
    dqkv[k].assign(qkv.size(), 0.f);
    const AttentionDropout* d = k == 0 ? nullptr : &zero;
    attention_forward(out[k].data(), att[k].data(), qkv.data(), B, T, C, NH, d);
    attention_backward(dqkv[k].data(), dy.data(), qkv.data(), att[k].data(), B, T, C, NH, d);
  }
  CHECK(out[0] == out[1]);
  CHECK(att[0] == att[1]);
  CHECK(dqkv[0] == dqkv[1]);
}

TEST_CASE("dropout and attention dropout give bit-identical results with 1 and 2 threads") {
  constexpr int B = 3, T = 32, C = 96, NH = 4;
  Rng rng(46);
  const auto qkv = to_float(rng.vec(int64_t(B) * T * 3 * C, -2, 2));
  const auto dy = to_float(rng.vec(int64_t(B) * T * C));
  const AttentionDropout dropout{0.1, kKeys.data()};
  std::vector<float> out[2], att[2], dqkv[2], hidden[2], dhidden[2];
  const int before = num_threads();
  for (int k = 0; k < 2; ++k) {
    set_num_threads(k + 1);
    out[k].resize(dy.size());
    att[k].resize(int64_t(B) * NH * T * T);
    dqkv[k].assign(qkv.size(), 0.f);
    attention_forward(out[k].data(), att[k].data(), qkv.data(), B, T, C, NH, &dropout);
    attention_backward(dqkv[k].data(), dy.data(), qkv.data(), att[k].data(), B, T, C, NH, &dropout);
    hidden[k].resize(dy.size());
    dropout_forward(hidden[k].data(), dy.data(), kKeys.data(), 0.1, B, int64_t(T) * C);
    dhidden[k].resize(dy.size());
    dropout_backward(dhidden[k].data(), dy.data(), kKeys.data(), 0.1, B, int64_t(T) * C);
  }
  set_num_threads(before);
  CHECK(out[0] == out[1]);
  CHECK(att[0] == att[1]);
  CHECK(dqkv[0] == dqkv[1]);
  CHECK(hidden[0] == hidden[1]);
  CHECK(dhidden[0] == dhidden[1]);
}

}  // namespace
}  // namespace gpt::test
