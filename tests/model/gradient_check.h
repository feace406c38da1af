// Shared by the whole-model gradient checks: the tiny configuration, parameters nudged so that no gradient is
// trivially zero, and the comparison of analytic gradients against a fourth-order central difference of the
// loss (truncation O(h^4), so the comparison is limited by double rounding rather than by the step).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

namespace gpt::test {

inline GPTConfig tiny_config() {
  GPTConfig config;
  config.num_layers = 2;
  config.hidden = 32;
  config.heads = 2;
  config.seq_len = 8;
  config.max_positions = 8;
  config.vocab = 64;
  return config;
}

// Larger-than-GPT-2 LayerNorm gains and biases so that no parameter's gradient is trivially zero.
inline void perturb_norms_and_biases(GPT2<double>& model) {
  for (const ParamInfo& p : model.table().params) {
    if (p.name.find(".bias") != std::string::npos || p.name.find("ln_") != std::string::npos) {
      for (int64_t i = 0; i < p.numel; ++i)
        model.params[p.offset + i] += 0.1 * std::sin(0.37 * double(p.offset + i));
    }
  }
}

struct GradientCheckStats {
  int checked = 0, large = 0;
  double worst_rel = 0, worst_abs = 0;
};

// Compares analytic[i] with (-L(x+2h) + 8 L(x+h) - 8 L(x-h) + L(x-2h)) / 12h for every stride-th element of
// each parameter tensor (starting at its first, so every tensor is covered). loss() runs the forward from
// model.params. Bounds: relative error < 1e-5 where |g| > 1e-6, absolute error < 1e-9 elsewhere.
// How many elements check_model_gradients visits at `stride`.
inline int64_t elements_checked(const ParamTable& table, int64_t stride) {
  int64_t count = 0;
  for (const ParamInfo& p : table.params) count += (p.numel + stride - 1) / stride;
  return count;
}

inline GradientCheckStats check_model_gradients(GPT2<double>& model, const std::vector<double>& analytic,
                                                const std::function<double()>& loss, int64_t stride = 1) {
  const double h = 1e-3;
  GradientCheckStats stats;
  for (const ParamInfo& p : model.table().params) {
    for (int64_t i = p.offset; i < p.offset + p.numel; i += stride) {
      const double saved = model.params[i];
      auto loss_at = [&](double x) {
        model.params[i] = x;
        return loss();
      };
      const double numeric = (-loss_at(saved + 2 * h) + 8 * loss_at(saved + h) - 8 * loss_at(saved - h) +
                              loss_at(saved - 2 * h)) /
                             (12 * h);
      model.params[i] = saved;
      const double g = analytic[i], err = std::fabs(g - numeric);
      ++stats.checked;
      if (std::fabs(g) > 1e-6) {
        ++stats.large;
        const double rel = err / std::fabs(g);
        stats.worst_rel = std::max(stats.worst_rel, rel);
        if (rel >= 1e-5)
          FAIL_CHECK(p.name << "[" << i - p.offset << "]: analytic " << g << " numeric " << numeric);
      } else {
        stats.worst_abs = std::max(stats.worst_abs, err);
        if (err >= 1e-9)
          FAIL_CHECK(p.name << "[" << i - p.offset << "]: analytic " << g << " numeric " << numeric);
      }
    }
  }
  return stats;
}

}  // namespace gpt::test
