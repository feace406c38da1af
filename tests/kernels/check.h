// Test support for the CPU kernels: seeded random data, closeness checks, and the central-difference gradient
// check that every backward is tested with.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace gpt::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  int32_t index(int32_t n) { return std::uniform_int_distribution<int32_t>(0, n - 1)(gen_); }
  std::vector<double> vec(int64_t n, double lo = -1.0, double hi = 1.0) {
    std::vector<double> v(n);
    for (double& x : v) x = uniform(lo, hi);
    return v;
  }
  std::vector<int32_t> tokens(int64_t n, int32_t vocab) {
    std::vector<int32_t> v(n);
    for (int32_t& t : v) t = index(vocab);
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

inline std::vector<float> to_float(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}
inline std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// Every element satisfies |got - want| <= rtol |want| + atol.
template <typename A, typename B>
void expect_close(const std::string& what, const std::vector<A>& got, const std::vector<B>& want, double rtol,
                  double atol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  int64_t worst_i = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess =
        std::abs(double(got[i]) - double(want[i])) - (rtol * std::abs(double(want[i])) + atol);
    if (!(excess <= worst)) {  // also catches NaN
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_i = int64_t(i);
    }
  }
  INFO(what << ": worst element " << worst_i << " got " << (worst_i >= 0 ? double(got[worst_i]) : 0.0)
            << " want " << (worst_i >= 0 ? double(want[worst_i]) : 0.0));
  CHECK(worst_i == -1);
}

// Compares analytic[i] with the central difference (L(x + h e_i) - L(x - h e_i)) / 2h for every element of x.
// loss() must evaluate the forward from the current contents of x. The bound is a relative error of 1e-6
// with an absolute floor of 1e-9 for gradients that are (near) zero, where the difference itself is only
// accurate to roundoff of L / h.
inline void check_gradient(const std::string& what, std::vector<double>& x,
                           const std::function<double()>& loss, const std::vector<double>& analytic,
                           double h = 1e-5) {
  REQUIRE(analytic.size() == x.size());
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    numeric[i] = (up - down) / (2 * h);
  }
  double max_rel = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double scale = std::max(std::abs(numeric[i]), std::abs(analytic[i]));
    if (scale > 1e-3) max_rel = std::max(max_rel, std::abs(numeric[i] - analytic[i]) / scale);
  }
  MESSAGE(what << ": max relative error " << max_rel);
  expect_close("gradient of " + what, analytic, numeric, 1e-6, 1e-9);
}

// max |got - want| <= tolerance * max |want| (and want not all zero): how results computed in another order
// (chunks, tiles, another backend) are compared.
inline void expect_relative(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                            double tolerance) {
  REQUIRE(got.size() == want.size());
  double scale = 0, error = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(double(want[i])));
    error = std::max(error, std::abs(double(got[i]) - double(want[i])));
  }
  INFO(what << ": max error " << error << " of max magnitude " << scale);
  CHECK(scale > 0);
  CHECK(error <= tolerance * scale);
}

}  // namespace gpt::test
