// The per-element math that the CPU and CUDA kernels share through kernels/common (AdamW's element update,
// GELU, dropout's keep rule and scale), against independent references written here: the formulas in double
// (or long double), a central-difference derivative, and the uniform draw compared with p directly. Also
// checks that the CPU's AdamW kernel is exactly the shared element update.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/common/adamw_element.h"
#include "kernels/common/dropout_bits.h"
#include "kernels/common/gelu_element.h"
#include "kernels/common/random.h"
#include "kernels/cpu/adamw.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

// ---- AdamW ----

struct AdamState {
  double param, m, v;
};

// One AdamW (or L2 Adam) step in double straight from the hyperparameters.
AdamState reference_adam(AdamState s, double grad, const AdamWHyper& h, int64_t step, double grad_scale) {
  double g = grad * grad_scale;
  if (!h.decoupled) g += h.weight_decay * s.param;
  const double m = h.beta1 * s.m + (1 - h.beta1) * g;
  const double v = h.beta2 * s.v + (1 - h.beta2) * g * g;
  const double mhat = m / (1 - std::pow(h.beta1, double(step)));
  const double vhat = v / (1 - std::pow(h.beta2, double(step)));
  double delta = mhat / (std::sqrt(vhat) + h.eps);
  if (h.decoupled) delta += h.weight_decay * s.param;
  return {s.param - h.lr * delta, m, v};
}

// The shared update in Real from state given in Real, against the reference on the same (widened) inputs.
template <typename Real>
void check_adam_element(const AdamWHyper& h, int64_t step, double grad_scale, double rtol) {
  CAPTURE(h.decoupled);
  CAPTURE(h.weight_decay);
  CAPTURE(step);
  Rng rng(uint64_t(step) * 7 + (h.decoupled ? 1 : 0));
  const adamw::Constants<Real> c = adamw::constants(h, step, Real(grad_scale));
  for (int i = 0; i < 2000; ++i) {
    const Real p0 = Real(rng.uniform(-2, 2)), m0 = Real(rng.uniform(-1e-2, 1e-2));
    const Real v0 = Real(rng.uniform(0, 1e-4)), grad = Real(rng.uniform(-0.1, 0.1));
    Real p = p0, m = m0, v = v0;
    if (h.decoupled) {
      adamw::update<true>(p, m, v, grad, c);
    } else {
      adamw::update<false>(p, m, v, grad, c);
    }
    const AdamState want =
        reference_adam({double(p0), double(m0), double(v0)}, double(grad), h, step, grad_scale);
    // m and v: a few roundings of terms of like sign. param: its own rounding plus the step's relative error.
    CHECK(std::fabs(double(m) - want.m) <= rtol * (std::fabs(want.m) + std::fabs(double(m0))) + 1e-300);
    CHECK(std::fabs(double(v) - want.v) <= rtol * (std::fabs(want.v) + 1e-300));
    const double step_size = h.lr * (1 + h.weight_decay * std::fabs(double(p0)));
    CHECK(std::fabs(double(p) - want.param) <= rtol * (std::fabs(want.param) + step_size));
  }
}

TEST_CASE("adamw element update matches the double formula, both modes, float and double") {
  for (bool decoupled : {true, false})
    for (double wd : {0.0, 0.1})
      for (int64_t step : {1, 2, 10, 1000}) {
        const AdamWHyper h{
            .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = wd, .decoupled = decoupled};
        check_adam_element<float>(h, step, 0.5, 4e-6);
        check_adam_element<double>(h, step, 0.5, 1e-13);
      }
}

TEST_CASE("adamw constants are the hyperparameters rounded once, bias corrections from double") {
  const AdamWHyper h{.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (int64_t step : {1, 3, 100}) {
    const adamw::Constants<float> c = adamw::constants(h, step, 0.25f);
    CHECK(c.b1 == 0.9f);
    CHECK(c.one_b1 == float(1.0 - 0.9));
    CHECK(c.b2 == 0.95f);
    CHECK(c.one_b2 == float(1.0 - 0.95));
    CHECK(c.inv_bc1 == float(1.0L / (1.0L - std::pow(0.9L, step))));
    CHECK(c.inv_bc2 == float(1.0L / (1.0L - std::pow(0.95L, step))));
    CHECK(c.lr == 3e-4f);
    CHECK(c.eps == 1e-8f);
    CHECK(c.wd == 0.1f);
    CHECK(c.grad_scale == 0.25f);
  }
}

TEST_CASE("adamw's first step is lr * sign(grad), and decay alone shrinks the parameter") {
  const AdamWHyper h{.lr = 0.1, .eps = 1e-12};
  const adamw::Constants<double> c = adamw::constants(h, 1, 1.0);
  double p = 1.0, m = 0, v = 0;
  adamw::update<true>(p, m, v, -3.0, c);
  CHECK(p == doctest::Approx(1.1).epsilon(1e-10));
  const AdamWHyper decay{.lr = 0.1, .weight_decay = 0.5};
  double q = 2.0, mq = 0, vq = 0;
  adamw::update<true>(q, mq, vq, 0.0, adamw::constants(decay, 1, 1.0));
  CHECK(q == doctest::Approx(2.0 - 0.1 * 0.5 * 2.0));
}

// The CPU kernel's loops call the element update: their results agree bit for bit, in both modes.
TEST_CASE("the CPU adamw kernel is the shared element update") {
  constexpr int64_t kN = 1037;
  Rng rng(5);
  for (bool decoupled : {true, false}) {
    const AdamWHyper h{.lr = 1e-2, .weight_decay = 0.05, .decoupled = decoupled};
    std::vector<float> param = to_float(rng.vec(kN)), grad = to_float(rng.vec(kN));
    std::vector<float> m = to_float(rng.vec(kN, -0.1, 0.1)), v = to_float(rng.vec(kN, 0, 0.01));
    std::vector<float> p2 = param, m2 = m, v2 = v;
    cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), kN, h, 7, 0.5f);
    const adamw::Constants<float> c = adamw::constants(h, 7, 0.5f);
    for (int64_t i = 0; i < kN; ++i) {
      if (decoupled) {
        adamw::update<true>(p2[i], m2[i], v2[i], grad[i], c);
      } else {
        adamw::update<false>(p2[i], m2[i], v2[i], grad[i], c);
      }
    }
    CHECK(param == p2);
    CHECK(m == m2);
    CHECK(v == v2);
  }
}

// ---- GELU ----

long double reference_gelu(long double x) {
  const long double s = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  return 0.5L * x * (1.0L + std::tanh(s * (x + 0.044715L * x * x * x)));
}

// The derivative by central differences of the reference (error about h^2 |f'''|, far below the tolerances).
long double reference_gelu_derivative(long double x) {
  const long double h = 1e-6L;
  return (reference_gelu(x + h) - reference_gelu(x - h)) / (2 * h);
}

// How much an error of one unit in tanh(u) (near its saturation) moves the derivative: the conditioning of
// 1 - tanh^2 times x/2 s (1 + 3k x^2).
double derivative_scale(double x) {
  return 1 + 0.5 * std::fabs(x) * 0.8 * (1 + 3 * 0.044715 * x * x);
}

TEST_CASE("gelu forward and derivative match the formula in float and double") {
  for (double x = -8.0; x <= 8.0; x += 1.0 / 64) {
    CAPTURE(x);
    const double want = double(reference_gelu(x)), dwant = double(reference_gelu_derivative(x));
    const float xf = float(x);  // exact: x is a multiple of 1/64
    CHECK(std::fabs(double(gelu::forward(xf)) - want) <= 4e-7 * (std::fabs(x) + 1));
    CHECK(std::fabs(double(gelu::derivative(xf)) - dwant) <= 4e-7 * derivative_scale(x));
    CHECK(std::fabs(gelu::forward(x) - want) <= 1e-15 * (std::fabs(x) + 1));
    CHECK(std::fabs(gelu::derivative(x) - dwant) <= 1e-9 * derivative_scale(x));
  }
}

TEST_CASE("gelu's pieces around tanh compose to the whole") {
  Rng rng(9);
  for (int i = 0; i < 1000; ++i) {
    const float x = float(rng.uniform(-6, 6));
    const float th = std::tanh(gelu::tanh_argument(x));
    CHECK(gelu::forward_from_tanh(x, th) == gelu::forward(x));
    CHECK(gelu::derivative_from_tanh(x, th) == gelu::derivative(x));
  }
  CHECK(gelu::forward(0.0f) == 0.0f);
  CHECK(gelu::derivative(0.0) == 0.5);
}

// ---- Dropout ----

// The keep decision computed directly from its definition: the 24-bit uniform draw is at least p.
bool reference_keeps(uint64_t key, uint64_t counter, double p) {
  return double(random::uniform32(key, counter)) >= p;
}

TEST_CASE("dropout's integer keep rule is uniform32(key, e) >= p, across p and keys") {
  Rng rng(13);
  std::vector<double> ps = {0.0, 1e-9, 0x1.0p-24,     0x1.8p-24, 0.1, 0.25,
                            0.5, 0.9,  1 - 0x1.0p-24, 1.0,       1.5, -0.5};
  for (int i = 0; i < 40; ++i) ps.push_back(rng.uniform(0, 1));
  int64_t mismatches = 0;
  for (double p : ps) {
    const uint64_t threshold = dropout::threshold(p);
    for (uint64_t k = 0; k < 8; ++k) {
      const uint64_t key = random::mix64(k * 977 + 5);
      for (uint64_t e = 0; e < 4096; ++e)
        mismatches += dropout::keeps(key, e, threshold) != reference_keeps(key, e, p);
    }
  }
  CHECK(mismatches == 0);
}

// Every draw u sits on a boundary when p is u itself (kept) or the next double above it (dropped).
TEST_CASE("dropout's keep rule is exact at the draws themselves") {
  int64_t mismatches = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    const uint64_t key = random::derive_key(k + 1, 42);
    for (uint64_t e = 0; e < 20000; ++e) {
      const double u = random::uniform32(key, e);
      for (double p : {u, std::nextafter(u, 2.0), std::nextafter(u, -1.0)})
        mismatches += dropout::keeps(key, e, dropout::threshold(p)) != reference_keeps(key, e, p);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("dropout's scale is 1 / (1 - p), rounded once; nothing is kept at p >= 1") {
  for (double p : {0.0, 0.1, 0.2, 0.5, 1.0 / 3, 0.9, 0.999}) {
    CAPTURE(p);
    const long double want = 1.0L / (1.0L - (long double)p);
    CHECK(dropout::scale<double>(p) == 1.0 / (1.0 - p));
    CHECK(std::fabs((long double)dropout::scale<double>(p) - want) <= 2e-16L * want);
    CHECK(dropout::scale<float>(p) == float(1.0 / (1.0 - p)));
    CHECK(std::fabs((long double)dropout::scale<float>(p) - want) <= 1e-7L * want);
  }
  CHECK(dropout::scale<float>(1.0) == 0.0f);
  CHECK(dropout::scale<double>(2.0) == 0.0);
  CHECK(dropout::threshold(1.0) == (uint64_t(1) << 24));
  CHECK(dropout::threshold(0.0) == 0);
}

}  // namespace
}  // namespace gpt::test
