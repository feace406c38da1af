// Naive double-precision references for the CPU kernels (see reference.h): clarity over speed.
#include "tests/kernels/reference.h"

#include <cmath>

namespace gpt::test::ref {

Vec embedding(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe, int B, int T, int C) {
  Vec out(size_t(B) * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        out[(size_t(b) * T + t) * C + c] = wte[size_t(tokens[b * T + t]) * C + c] + wpe[size_t(t) * C + c];
  return out;
}

Vec layernorm(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C) {
  Vec out(inp.size());
  for (int n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += inp[size_t(n) * C + c] / C;
    for (int c = 0; c < C; ++c) var += std::pow(inp[size_t(n) * C + c] - mean, 2) / C;
    for (int c = 0; c < C; ++c)
      out[size_t(n) * C + c] = (inp[size_t(n) * C + c] - mean) / std::sqrt(var + 1e-5) * weight[c] + bias[c];
  }
  return out;
}

Vec linear(const Vec& inp, const Vec& weight, const Vec* bias, int N, int C, int OC) {
  Vec out(size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double acc = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; ++c) acc += inp[size_t(n) * C + c] * weight[size_t(o) * C + c];
      out[size_t(n) * OC + o] = acc;
    }
  return out;
}

Vec attention(Vec& att, const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  Vec out(size_t(B) * T * C, 0.0);
  att.assign(size_t(B) * NH * T * T, 0.0);
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(size_t(b) * T + t) * 3 * C + part * C + h * hs + i];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        Vec score(T, -INFINITY);
        double mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          double s = 0;
          for (int i = 0; i < hs; ++i) s += at(b, t, 0, h, i) * at(b, j, 1, h, i);
          score[j] = s / std::sqrt(double(hs));
          mx = std::max(mx, score[j]);
        }
        double z = 0;
        for (int j = 0; j <= t; ++j) z += std::exp(score[j] - mx);
        double* row = &att[((size_t(b) * NH + h) * T + t) * T];
        for (int j = 0; j <= t; ++j) row[j] = std::exp(score[j] - mx) / z;
        for (int i = 0; i < hs; ++i) {
          double acc = 0;
          for (int j = 0; j <= t; ++j) acc += row[j] * at(b, j, 2, h, i);
          out[(size_t(b) * T + t) * C + h * hs + i] = acc;
        }
      }
  return out;
}

Vec gelu(const Vec& inp) {
  Vec out(inp.size());
  const double pi = std::acos(-1.0);
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    out[i] = 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
  }
  return out;
}

Vec cross_entropy(Vec& probs, const Vec& logits, const std::vector<int32_t>& targets, int N, int V, int Vp) {
  Vec losses(N);
  probs.assign(size_t(N) * Vp, 0.0);
  for (int n = 0; n < N; ++n) {
    const double* z = &logits[size_t(n) * Vp];
    double mx = z[0];
    for (int j = 1; j < V; ++j) mx = std::max(mx, z[j]);
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
    for (int j = 0; j < V; ++j) probs[size_t(n) * Vp + j] = std::exp(z[j] - mx) / sum;
    losses[n] = -(z[targets[n]] - mx - std::log(sum));
  }
  return losses;
}

void adamw(Vec& param, const Vec& grad, Vec& m, Vec& v, const Adam& h, int step, double grad_scale) {
  for (size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i] * grad_scale;
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
    const double mhat = m[i] / (1 - std::pow(h.beta1, step));
    const double vhat = v[i] / (1 - std::pow(h.beta2, step));
    param[i] -= h.lr * (mhat / (std::sqrt(vhat) + h.eps) + h.weight_decay * param[i]);
  }
}

}  // namespace gpt::test::ref
