// AdamW against a straightforward double implementation of its formula (reference.h) over several steps:
// weight decay on and off, gradient scaling, bias correction with the 1-based step.
#include <doctest/doctest.h>

#include "kernels/cpu/adamw.h"
#include "tests/kernels/check.h"
#include "tests/kernels/reference.h"

namespace gpt::test {
namespace {

using gpt::cpu::adamw_update;
using gpt::cpu::AdamWHyper;

constexpr int64_t kN = 1003;  // not a multiple of any vector width
constexpr int kSteps = 5;

template <typename Real>
void compare_to_reference(double weight_decay, double grad_scale, double tol) {
  CAPTURE(weight_decay);
  CAPTURE(grad_scale);
  Rng rng(21);
  const AdamWHyper hyper{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = weight_decay};
  const ref::Adam ref_hyper{hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay};
  const auto init = to_double(to_float(rng.vec(kN)));
  std::vector<Real> param(init.begin(), init.end()), m(kN, Real(0)), v(kN, Real(0));
  std::vector<double> want = init, want_m(kN, 0.0), want_v(kN, 0.0);
  for (int step = 1; step <= kSteps; ++step) {
    CAPTURE(step);
    const auto grad_d = to_double(to_float(rng.vec(kN, -2, 2)));
    const std::vector<Real> grad(grad_d.begin(), grad_d.end());
    adamw_update(param.data(), grad.data(), m.data(), v.data(), kN, hyper, step, Real(grad_scale));
    ref::adamw(want, grad_d, want_m, want_v, ref_hyper, step, grad_scale);
    expect_close("param", param, want, tol, tol);
    expect_close("m", m, want_m, tol, tol);
    expect_close("v", v, want_v, tol, tol);
  }
}

TEST_CASE("adamw matches its formula over several steps") {
  for (double wd : {0.0, 0.1})
    for (double scale : {1.0, 0.5}) {
      compare_to_reference<double>(wd, scale, 1e-13);
      compare_to_reference<float>(wd, scale, 2e-6);
    }
}

TEST_CASE("adamw's first step moves each parameter by lr against the gradient's sign") {
  // At step 1, mhat = g and vhat = g^2, so the step is lr g / (|g| + eps), about lr sign(g).
  const AdamWHyper hyper{.lr = 0.1, .weight_decay = 0.0};
  std::vector<double> param{1.0, 1.0, 1.0}, grad{3.0, -0.5, 0.0}, m(3, 0.0), v(3, 0.0);
  adamw_update(param.data(), grad.data(), m.data(), v.data(), 3, hyper, 1);
  CHECK(param[0] == doctest::Approx(0.9).epsilon(1e-7));
  CHECK(param[1] == doctest::Approx(1.1).epsilon(1e-7));
  CHECK(param[2] == 1.0);
  // Decoupled decay shrinks the parameter by lr * wd * param even with a zero gradient.
  const AdamWHyper decay{.lr = 0.1, .weight_decay = 0.5};
  std::vector<double> p{2.0}, g{0.0}, m1{0.0}, v1{0.0};
  adamw_update(p.data(), g.data(), m1.data(), v1.data(), 1, decay, 1);
  CHECK(p[0] == doctest::Approx(2.0 - 0.1 * 0.5 * 2.0));
}

}  // namespace
}  // namespace gpt::test
