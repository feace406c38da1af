// The key/value-cache decoder (model/decoder.h) against the full forward: token by token, its logits equal
// the full forward's row of the same position (to rounding in fp32, to 1e-12 in fp64), over every position
// of the window; and it refuses a step past the last position.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/decoder.h"
#include "model/model.h"
#include "tests/model/gradient_check.h"

namespace gpt {
namespace {

// The largest |decoder - full| over every logit of every position, relative to the largest |logit|.
template <typename Real>
double worst_difference(const GPTConfig& config) {
  const int T = config.max_positions;
  GPT2<Real> model(config, 1);
  model.init(99);
  std::vector<int32_t> tokens(T);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 29 + 3) % config.vocab;
  model.forward(tokens.data(), nullptr);
  const int64_t Vp = config.padded_vocab();
  const std::vector<Real> full(model.logits(), model.logits() + int64_t(T) * Vp);

  Arena arena;
  Decoder<Real> decoder(config, cpu_ops(), arena);
  double worst = 0, largest = 0;
  for (int t = 0; t < T; ++t) {
    const Real* logits = static_cast<const Real*>(decoder.step(model.params.data(), tokens[t]).data);
    for (int v = 0; v < config.vocab; ++v) {
      worst = std::max(worst, std::fabs(double(logits[v]) - double(full[int64_t(t) * Vp + v])));
      largest = std::max(largest, std::fabs(double(full[int64_t(t) * Vp + v])));
    }
  }
  CHECK(decoder.length() == T);
  CHECK_THROWS_AS(decoder.step(model.params.data(), 0), std::logic_error);
  decoder.reset();
  CHECK(decoder.length() == 0);
  return worst / largest;
}

TEST_CASE("decoder: every position's logits equal the full forward's") {
  const GPTConfig config = test::tiny_config();
  CHECK(worst_difference<double>(config) < 1e-12);
  CHECK(worst_difference<float>(config) < 1e-5);
}

}  // namespace
}  // namespace gpt
