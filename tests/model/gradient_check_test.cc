// Whole-model gradient check: every parameter's analytic gradient of a tiny GPT-2, in double precision,
// against a fourth-order central difference of the loss (truncation O(h^4), so the comparison is limited by
// double rounding rather than by the step).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "model/model.h"

namespace {

gpt::GPTConfig tiny_config() {
  gpt::GPTConfig config;
  config.num_layers = 2;
  config.hidden = 32;
  config.heads = 2;
  config.seq_len = 8;
  config.max_positions = 8;
  config.vocab = 64;
  return config;
}

}  // namespace

TEST_CASE("tiny GPT-2: analytic gradients of every parameter match central differences") {
  const gpt::GPTConfig config = tiny_config();
  const int B = 2, T = config.seq_len;
  gpt::GPT2<double> model(config, B);
  model.init(1234);
  // Larger-than-GPT-2 LayerNorm gains and biases so that no parameter's gradient is trivially zero.
  for (const gpt::ParamInfo& p : model.table().params) {
    if (p.name.find(".bias") != std::string::npos || p.name.find("ln_") != std::string::npos) {
      for (int64_t i = 0; i < p.numel; ++i) {
        model.params[p.offset + i] += 0.1 * std::sin(0.37 * double(p.offset + i));
      }
    }
  }
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (i * 37 + 11) % config.vocab;
    targets[i] = (i * 53 + 7) % config.vocab;
  }

  model.zero_grad();
  model.forward(inputs.data(), targets.data());
  model.backward(1.0);
  const std::vector<double> analytic = model.grads;

  const double h = 1e-3;
  int checked = 0, large = 0;
  double worst_rel = 0, worst_abs = 0;
  for (const gpt::ParamInfo& p : model.table().params) {
    for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
      const double saved = model.params[i];
      auto loss_at = [&](double x) {
        model.params[i] = x;
        return model.forward(inputs.data(), targets.data());
      };
      const double numeric = (-loss_at(saved + 2 * h) + 8 * loss_at(saved + h) - 8 * loss_at(saved - h) +
                              loss_at(saved - 2 * h)) /
                             (12 * h);
      model.params[i] = saved;
      const double g = analytic[i], err = std::fabs(g - numeric);
      ++checked;
      if (std::fabs(g) > 1e-6) {
        ++large;
        const double rel = err / std::fabs(g);
        worst_rel = std::max(worst_rel, rel);
        if (rel >= 1e-5)
          FAIL_CHECK(p.name << "[" << i - p.offset << "]: analytic " << g << " numeric " << numeric);
      } else {
        worst_abs = std::max(worst_abs, err);
        if (err >= 1e-9)
          FAIL_CHECK(p.name << "[" << i - p.offset << "]: analytic " << g << " numeric " << numeric);
      }
    }
  }
  std::printf(
      "gradient check: %d parameters (%d with |g| > 1e-6), worst relative error %.3g, worst absolute "
      "error elsewhere %.3g\n",
      checked, large, worst_rel, worst_abs);
  CHECK(checked == model.table().total);
  CHECK(large > checked / 2);
}
