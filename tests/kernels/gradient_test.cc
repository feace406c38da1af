// Every CPU kernel's backward against central finite differences, in double precision. The loss is a random
// weighted sum of the forward's outputs, L = sum_i w_i y_i, so dL/dy = w is what the backward receives.
// Gradient buffers start filled with random values: the check uses (buffer after - buffer before), which
// holds only if the backward accumulates as its header promises.
#include <doctest/doctest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

using namespace gpt::cpu;

constexpr int B = 2, T = 5, C = 8, NH = 2, V = 11, Vp = 16, kMaxT = 7, N = B * T;

TEST_CASE("embedding backward matches finite differences") {
  Rng rng(1);
  auto wte = rng.vec(int64_t(Vp) * C), wpe = rng.vec(int64_t(kMaxT) * C);
  for (int64_t i = int64_t(V) * C; i < int64_t(Vp) * C; ++i) wte[i] = 0;  // padding rows, as in the model
  auto tokens = rng.tokens(N, V);
  tokens[7] = tokens[2];  // a repeated token must get the sum of both gradients
  const auto w = rng.vec(int64_t(N) * C);
  std::vector<double> out(w.size());
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(w, out);
  };
  const auto dwte0 = rng.vec(wte.size()), dwpe0 = rng.vec(wpe.size());
  auto dwte = dwte0, dwpe = dwpe0;
  embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  check_gradient("wte", wte, loss, minus(dwte, dwte0));
  check_gradient("wpe", wpe, loss, minus(dwpe, dwpe0));
  for (int64_t i = int64_t(V) * C; i < int64_t(Vp) * C; ++i) CHECK(dwte[i] == dwte0[i]);  // padding untouched

  // Either output may be null.
  auto only_wpe = dwpe0;
  embedding_backward<double>(nullptr, only_wpe.data(), w.data(), tokens.data(), B, T, C);
  CHECK(only_wpe == dwpe);
  auto only_wte = dwte0;
  embedding_backward<double>(only_wte.data(), nullptr, w.data(), tokens.data(), B, T, C);
  CHECK(only_wte == dwte);
}

TEST_CASE("layernorm backward matches finite differences") {
  Rng rng(2);
  auto inp = rng.vec(int64_t(N) * C, -2, 2), weight = rng.vec(C, 0.5, 1.5), bias = rng.vec(C);
  const auto w = rng.vec(inp.size());
  std::vector<double> out(inp.size()), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return dot(w, out);
  };
  loss();
  const auto dinp0 = rng.vec(inp.size()), dw0 = rng.vec(C), db0 = rng.vec(C);
  auto dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward(dinp.data(), dw.data(), db.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  check_gradient("inp", inp, loss, minus(dinp, dinp0));
  check_gradient("weight", weight, loss, minus(dw, dw0));
  check_gradient("bias", bias, loss, minus(db, db0));
}

TEST_CASE("linear backward matches finite differences") {
  constexpr int OC = 12;
  Rng rng(3);
  auto inp = rng.vec(int64_t(N) * C), weight = rng.vec(int64_t(OC) * C), bias = rng.vec(OC);
  const auto w = rng.vec(int64_t(N) * OC);
  std::vector<double> out(w.size());
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    auto loss = [&] {
      linear_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);
      return dot(w, out);
    };
    const auto dinp0 = rng.vec(inp.size()), dw0 = rng.vec(weight.size()), db0 = rng.vec(OC);
    auto dinp = dinp0, dw = dw0, db = db0;
    linear_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, w.data(), inp.data(),
                    weight.data(), N, C, OC);
    check_gradient("inp", inp, loss, minus(dinp, dinp0));
    check_gradient("weight", weight, loss, minus(dw, dw0));
    if (with_bias) check_gradient("bias", bias, loss, minus(db, db0));
    CHECK((with_bias || db == db0));

    // dinp may be null (the first layer's input needs no gradient): dweight is the same.
    auto dw_only = dw0;
    linear_backward<double>(nullptr, dw_only.data(), nullptr, w.data(), inp.data(), weight.data(), N, C, OC);
    expect_close("dweight without dinp", dw_only, dw, 1e-14, 1e-14);
  }
}

TEST_CASE("attention backward matches finite differences") {
  Rng rng(4);
  auto qkv = rng.vec(int64_t(B) * T * 3 * C, -1.5, 1.5);
  const auto w = rng.vec(int64_t(B) * T * C);
  std::vector<double> out(w.size()), att(int64_t(B) * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(w, out);
  };
  loss();
  const auto dqkv0 = rng.vec(qkv.size());
  auto dqkv = dqkv0;
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
  check_gradient("qkv", qkv, loss, minus(dqkv, dqkv0));
}

TEST_CASE("gelu backward matches finite differences") {
  Rng rng(5);
  auto inp = rng.vec(37, -5, 5);
  inp[0] = 0;
  const auto w = rng.vec(inp.size());
  std::vector<double> out(inp.size());
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), int64_t(inp.size()));
    return dot(w, out);
  };
  const auto dinp0 = rng.vec(inp.size());
  auto dinp = dinp0;
  gelu_backward(dinp.data(), inp.data(), w.data(), int64_t(inp.size()));
  check_gradient("inp", inp, loss, minus(dinp, dinp0));
}

TEST_CASE("residual backward matches finite differences") {
  Rng rng(6);
  auto a = rng.vec(23), b = rng.vec(23);
  const auto w = rng.vec(23);
  std::vector<double> out(23);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), 23);
    return dot(w, out);
  };
  const auto da0 = rng.vec(23), db0 = rng.vec(23);
  auto da = da0, db = db0;
  residual_backward(da.data(), db.data(), w.data(), 23);
  check_gradient("a", a, loss, minus(da, da0));
  check_gradient("b", b, loss, minus(db, db0));
}

TEST_CASE("softmax cross-entropy backward matches finite differences, padding excluded") {
  Rng rng(7);
  auto logits = rng.vec(int64_t(N) * Vp, -3, 3);
  const auto targets = rng.tokens(N, V);
  const auto dlosses = rng.vec(N, 0.1, 1.0);  // a weighted mean of the per-token losses, as in training
  std::vector<double> losses(N), probs(logits.size());
  auto loss = [&] {
    softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
    return dot(dlosses, losses);
  };
  loss();
  // Backward overwrites: start from garbage to see that every element, padding included, is written.
  auto dlogits = rng.vec(logits.size());
  softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), dlosses.data(), N, V, Vp);
  check_gradient("logits", logits, loss, dlogits);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < Vp; ++j) CHECK(dlogits[int64_t(n) * Vp + j] == 0.0);
}

}  // namespace
}  // namespace gpt::test
