// The CUDA attention's GEMM plan (kernels/common/attention_gemm_plan.h) run on the host: each planned GEMM by
// a reference column-major strided-batched GEMM in double (cuBLAS's definition), the softmax steps between
// them as the CUDA kernels compute them, and the result against the CPU attention (kernels/cpu/attention.h)
// in double: out, att and the accumulated dqkv within 1e-12. This is how the layout of the cuBLAS calls is
// checked where no GPU is; a GEMM planned with a wrong transpose, leading dimension or stride is off by O(1).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/attention_gemm_plan.h"
#include "kernels/cpu/attention.h"

namespace gpt::test {
namespace {

struct HostTensors {
  std::vector<double> qkv, out, att, dout, dqkv, scratch;

  std::vector<double>& operator[](AttentionTensor t) {
    switch (t) {
      case AttentionTensor::kQkv:
        return qkv;
      case AttentionTensor::kOut:
        return out;
      case AttentionTensor::kAtt:
        return att;
      case AttentionTensor::kDout:
        return dout;
      case AttentionTensor::kDqkv:
        return dqkv;
      case AttentionTensor::kScratch:
        return scratch;
    }
    return scratch;
  }
};

// Element (row, col) of a column-major operand of batch entry h, through op() when transposed.
double at(HostTensors& t, const AttentionOperand& o, int h, bool transpose, int row, int col) {
  if (transpose) std::swap(row, col);
  const int64_t index = o.offset + h * o.stride + int64_t(col) * o.ld + row;
  const std::vector<double>& data = t[o.tensor];
  REQUIRE(index >= 0);
  REQUIRE(index < int64_t(data.size()));
  return data[size_t(index)];
}

// C = alpha op(A) op(B) + beta C per head, column-major: cuBLAS's strided-batched GEMM.
void run(HostTensors& t, const AttentionGemm& g) {
  for (int h = 0; h < g.batch; ++h) {
    for (int j = 0; j < g.n; ++j) {
      for (int i = 0; i < g.m; ++i) {
        double sum = 0;
        for (int l = 0; l < g.k; ++l)
          sum += at(t, g.a, h, g.transpose_a, i, l) * at(t, g.b, h, g.transpose_b, l, j);
        const int64_t index = g.c.offset + h * g.c.stride + int64_t(j) * g.c.ld + i;
        std::vector<double>& c = t[g.c.tensor];
        REQUIRE(index < int64_t(c.size()));
        c[size_t(index)] = g.alpha * sum + (g.beta == 0 ? 0.0 : g.beta * c[size_t(index)]);
      }
    }
  }
}

// The CUDA softmax kernels' math over rows [rows, T] (row r is query r % T).
void causal_softmax(double* p, int64_t rows, int T) {
  for (int64_t r = 0; r < rows; ++r) {
    double* row = p + r * T;
    const int i = int(r % T);
    const double m = *std::max_element(row, row + i + 1);
    double sum = 0;
    for (int j = 0; j <= i; ++j) sum += std::exp(row[j] - m);
    for (int j = 0; j < T; ++j) row[j] = j <= i ? std::exp(row[j] - m) / sum : 0.0;
  }
}

void causal_softmax_backward(double* d, const double* p, int64_t rows, int T, double scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const int i = int(r % T);
    double dot = 0;
    for (int j = 0; j <= i; ++j) dot += p[r * T + j] * d[r * T + j];
    for (int j = 0; j < T; ++j) d[r * T + j] = j <= i ? p[r * T + j] * (d[r * T + j] - dot) * scale : 0.0;
  }
}

std::vector<double> random_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Runs the plan as attention_gemm.cu does, heads of the backward in groups of `group`.
void run_plan(HostTensors& t, int B, int T, int C, int NH, int group) {
  const double scale = 1.0 / std::sqrt(double(C / NH));
  for (int b = 0; b < B; ++b) {
    const auto forward = attention_forward_gemms(b, T, C, NH, float(scale));
    run(t, forward[0]);
    causal_softmax(t.att.data() + int64_t(b) * NH * T * T, int64_t(NH) * T, T);
    run(t, forward[1]);
  }
  for (int b = 0; b < B; ++b) {
    for (int h0 = 0; h0 < NH; h0 += group) {
      const int heads = std::min(group, NH - h0);
      const auto backward = attention_backward_gemms(b, h0, heads, T, C, NH);
      run(t, backward[0]);
      run(t, backward[1]);
      causal_softmax_backward(t.scratch.data(), t.att.data() + (int64_t(b) * NH + h0) * T * T,
                              int64_t(heads) * T, T, scale);
      run(t, backward[2]);
      run(t, backward[3]);
    }
  }
}

void check_shape(int B, int T, int C, int NH, int group) {
  INFO("B " << B << " T " << T << " C " << C << " NH " << NH << " heads per group " << group);
  std::mt19937 rng(uint32_t(B * 1000 + T * 10 + NH));
  HostTensors plan;
  plan.qkv = random_values(size_t(B) * T * 3 * C, rng);
  plan.dout = random_values(size_t(B) * T * C, rng);
  plan.dqkv = random_values(size_t(B) * T * 3 * C, rng);  // accumulated into
  plan.out.assign(size_t(B) * T * C, 7.0);                // overwritten
  plan.att.assign(size_t(B) * NH * T * T, 7.0);
  plan.scratch.assign(size_t(group) * T * T, 7.0);
  std::vector<double> out(plan.out.size()), att(plan.att.size()), dqkv = plan.dqkv;
  // The reference takes the plan's float scale (1/sqrt(hs) rounded to float) only through S; use an hs whose
  // 1/sqrt is exact in float (4, 16, 64, 256) so both scales agree.
  cpu::attention_forward(out.data(), att.data(), plan.qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), plan.dout.data(), plan.qkv.data(), att.data(), B, T, C, NH);
  run_plan(plan, B, T, C, NH, group);
  CHECK(max_difference(plan.out, out) < 1e-12);
  CHECK(max_difference(plan.att, att) < 1e-12);
  CHECK(max_difference(plan.dqkv, dqkv) < 1e-12);
}

TEST_CASE("the attention GEMM plan computes the CPU attention, forward and backward") {
  check_shape(2, 5, 12, 3, 3);   // hs 4: all heads in one group
  check_shape(2, 7, 32, 2, 1);   // hs 16: one head per group
  check_shape(1, 9, 48, 3, 2);   // hs 16: groups of 2 and 1
  check_shape(3, 1, 16, 4, 4);   // T = 1
  check_shape(1, 33, 64, 1, 1);  // hs 64, T past a warp
}

TEST_CASE("a plan with a transpose flipped is caught") {
  const int B = 1, T = 6, C = 16, NH = 4;
  std::mt19937 rng(5);
  HostTensors plan;
  plan.qkv = random_values(size_t(B) * T * 3 * C, rng);
  plan.out.assign(size_t(B) * T * C, 0.0);
  plan.att.assign(size_t(B) * NH * T * T, 0.0);
  std::vector<double> out(plan.out.size()), att(plan.att.size());
  cpu::attention_forward(out.data(), att.data(), plan.qkv.data(), B, T, C, NH);
  auto forward = attention_forward_gemms(0, T, C, NH, 0.5f);
  forward[1].transpose_b = !forward[1].transpose_b;  // O = P^T V instead of P V
  run(plan, forward[0]);
  causal_softmax(plan.att.data(), int64_t(NH) * T, T);
  run(plan, forward[1]);
  CHECK(max_difference(plan.att, att) < 1e-12);
  CHECK(max_difference(plan.out, out) > 1e-3);
}

}  // namespace
}  // namespace gpt::test
