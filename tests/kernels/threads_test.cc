// The CPU kernels give the same results with 1 and 2 threads. No kernel's sums change order with the thread
// count, so results are bit-identical, the linear layer's included when its widths are multiples of 16 (the
// threads' column slices then start on Eigen's tile boundaries, so every element meets the same GEMM
// micro-kernel); at odd widths the edge tiles may round differently, within float tolerance.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/threads.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

using namespace gpt::cpu;
using Results = std::map<std::string, std::vector<float>>;

constexpr int B = 2, T = 32, C = 96, NH = 4, V = 1000, Vp = 1024, OC = 4 * C, N = B * T;

Results run_all(int threads) {
  set_num_threads(threads);
  REQUIRE(num_threads() == threads);
  Rng rng(31);
  auto r = [&](int64_t n) { return to_float(rng.vec(n, -2, 2)); };
  Results out;
  const auto tokens = rng.tokens(N, V);
  const auto wte = r(int64_t(Vp) * C), wpe = r(int64_t(T) * C), x = r(int64_t(N) * C), dy = r(int64_t(N) * C);

  auto& emb = out["embedding"] = std::vector<float>(int64_t(N) * C);
  embedding_forward(emb.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  auto& dwte = out["dwte"] = std::vector<float>(wte.size(), 0.f);
  auto& dwpe = out["dwpe"] = std::vector<float>(wpe.size(), 0.f);
  embedding_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C);

  const auto lw = r(C), lb = r(C);
  std::vector<float> mean(N), rstd(N);
  auto& ln = out["layernorm"] = std::vector<float>(x.size());
  layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), lw.data(), lb.data(), N, C);
  auto& ldx = out["layernorm dinp"] = std::vector<float>(x.size(), 0.f);
  auto& ldw = out["layernorm dweight"] = std::vector<float>(C, 0.f);
  auto& ldb = out["layernorm dbias"] = std::vector<float>(C, 0.f);
  layernorm_backward(ldx.data(), ldw.data(), ldb.data(), dy.data(), x.data(), lw.data(), mean.data(),
                     rstd.data(), N, C);

  const auto qkv = r(int64_t(N) * 3 * C);
  auto& att = out["att"] = std::vector<float>(int64_t(B) * NH * T * T);
  auto& ao = out["attention"] = std::vector<float>(int64_t(N) * C);
  attention_forward(ao.data(), att.data(), qkv.data(), B, T, C, NH);
  auto& dqkv = out["dqkv"] = std::vector<float>(qkv.size(), 0.f);
  attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);

  const auto h = r(int64_t(N) * OC), dh = r(int64_t(N) * OC);
  auto& g = out["gelu"] = std::vector<float>(h.size());
  gelu_forward(g.data(), h.data(), int64_t(h.size()));
  auto& dg = out["gelu dinp"] = std::vector<float>(h.size(), 0.f);
  gelu_backward(dg.data(), h.data(), dh.data(), int64_t(h.size()));

  auto& res = out["residual"] = std::vector<float>(x.size());
  residual_forward(res.data(), x.data(), dy.data(), int64_t(x.size()));
  auto& da = out["residual da"] = std::vector<float>(x.size(), 0.f);
  auto& db = out["residual db"] = std::vector<float>(x.size(), 1.f);
  residual_backward(da.data(), db.data(), dy.data(), int64_t(x.size()));

  const auto targets = rng.tokens(N, V);
  const auto logits = r(int64_t(N) * Vp);
  const std::vector<float> dlosses(N, 1.f / N);
  auto& losses = out["losses"] = std::vector<float>(N);
  auto& probs = out["probs"] = std::vector<float>(logits.size());
  softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  auto& dlogits = out["dlogits"] = std::vector<float>(logits.size());
  softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), dlosses.data(), N, V, Vp);

  auto& param = out["adamw param"] = r(100003);
  const auto grad = r(100003);
  std::vector<float> m(param.size(), 0.f), v(param.size(), 0.f);
  for (int step = 1; step <= 3; ++step)
    adamw_update(param.data(), grad.data(), m.data(), v.data(), int64_t(param.size()), AdamWHyper{}, step);

  const auto w = r(int64_t(OC) * C), bias = r(OC);
  auto& lin = out["linear"] = std::vector<float>(int64_t(N) * OC);
  linear_forward(lin.data(), x.data(), w.data(), bias.data(), N, C, OC);
  auto& ldinp = out["linear dinp"] = std::vector<float>(x.size(), 0.f);
  auto& ldweight = out["linear dweight"] = std::vector<float>(w.size(), 0.f);
  auto& ldbias = out["linear dbias"] = std::vector<float>(OC, 0.f);
  linear_backward(ldinp.data(), ldweight.data(), ldbias.data(), dh.data(), x.data(), w.data(), N, C, OC);
  return out;
}

TEST_CASE("linear at odd widths agrees across thread counts within rounding") {
  constexpr int n = 37, c = 53, oc = 101;
  Rng rng(32);
  const auto x = to_float(rng.vec(int64_t(n) * c)), w = to_float(rng.vec(int64_t(oc) * c));
  const auto dy = to_float(rng.vec(int64_t(n) * oc));
  std::vector<float> y[2], dx[2], dw[2];
  const int before = num_threads();
  for (int t = 0; t < 2; ++t) {
    set_num_threads(t + 1);
    y[t].resize(int64_t(n) * oc);
    dx[t].assign(x.size(), 0.f);
    dw[t].assign(w.size(), 0.f);
    linear_forward<float>(y[t].data(), x.data(), w.data(), nullptr, n, c, oc);
    linear_backward<float>(dx[t].data(), dw[t].data(), nullptr, dy.data(), x.data(), w.data(), n, c, oc);
  }
  set_num_threads(before);
  expect_close("out", y[1], y[0], 1e-5, 1e-5);
  expect_close("dinp", dx[1], dx[0], 1e-5, 1e-5);
  expect_close("dweight", dw[1], dw[0], 1e-5, 1e-5);
}

TEST_CASE("kernels give the same results with 1 and 2 threads") {
  const int before = num_threads();
  const Results one = run_all(1), two = run_all(2);
  set_num_threads(before);
  for (const auto& result : one) {
    const std::string& name = result.first;
    const auto& a = result.second;
    CAPTURE(name);
    const auto& b = two.at(name);
    CHECK_MESSAGE(a == b, name);
  }
}

}  // namespace
}  // namespace gpt::test
