// Dropout in the model layers: masks keyed by (seed, window, layer, site), so a block's recomputation
// replays them and splitting a batch into micro-batches changes nothing; probabilities 0 are bitwise the
// path without dropout; a block with active dropout must be told its layer.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/layers.h"
#include "model/model.h"
#include "tests/model/gradient_check.h"

namespace gpt::test {
namespace {

std::vector<int32_t> tokens(int n, int vocab, int a, int b) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * a + b) % vocab;
  return v;
}

TEST_CASE("dropout keys differ across seeds, windows, layers and sites") {
  std::set<uint64_t> keys;
  int count = 0;
  for (uint64_t seed : {0ULL, 1ULL})
    for (int64_t window : {0, 1, 1000000})
      for (int layer : {kEmbeddingLayer, 0, 1, 11})
        for (DropoutSite site : {DropoutSite::kEmbedding, DropoutSite::kAttentionProbs,
                                 DropoutSite::kAttentionOutput, DropoutSite::kMlpOutput}) {
          keys.insert(dropout_key(seed, window, layer, site));
          ++count;
        }
  CHECK(int(keys.size()) == count);
  const int64_t windows[] = {7, 3};
  const Dropout d{0.1, 0.1, 5, windows};
  const auto k = d.keys(2, DropoutSite::kMlpOutput, 2);
  CHECK(k[0] == dropout_key(5, 7, 2, DropoutSite::kMlpOutput));
  CHECK(k[1] == dropout_key(5, 3, 2, DropoutSite::kMlpOutput));
  CHECK(!Dropout{}.active());
  CHECK(!Dropout{0.0, 0.0, 5, windows}.active());
  CHECK(!Dropout{0.1, 0.1, 5, nullptr}.active());
  CHECK(Dropout{0.0, 0.1, 5, windows}.active());
}

TEST_CASE("probabilities 0, or no windows, are bitwise the model without dropout") {
  const GPTConfig config = tiny_config();
  const int B = 2, T = config.seq_len;
  const auto inputs = tokens(B * T, config.vocab, 37, 11), targets = tokens(B * T, config.vocab, 53, 7);
  const std::vector<int64_t> windows = {4, 9};
  GPT2<float> model(config, B);
  model.init(1);
  model.zero_grad();
  const float plain = model.forward(inputs.data(), targets.data());
  model.backward();
  const std::vector<float> plain_grads = model.grads;

  model.set_dropout(0.0, 0.0, 3);
  model.zero_grad();
  CHECK(model.forward(inputs.data(), targets.data(), windows.data()) == plain);
  model.backward();
  CHECK(model.grads == plain_grads);

  model.set_dropout(0.1, 0.1, 3);
  model.zero_grad();
  CHECK(model.forward(inputs.data(), targets.data()) == plain);  // forward(inputs, targets) never drops
  model.backward();
  CHECK(model.grads == plain_grads);
  CHECK(model.forward(inputs.data(), targets.data(), windows.data()) != plain);
}

TEST_CASE("a block's forward with the same dropout replays the same masks (checkpoint recomputation)") {
  const GPTConfig config = tiny_config();
  const int B = 2, T = config.seq_len, C = config.hidden;
  GPT2<float> model(config, B);
  model.init(2);
  const float* weights = model.params.data() + model.table().units[model.table().block_unit(1)].offset;
  std::vector<float> x(size_t(B) * T * C);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * float(i));
  const int64_t windows[] = {11, 12};
  const Dropout dropout{0.1, 0.1, 8, windows};
  Arena arena;
  BlockActivations a1, a2;
  a1.allocate(arena, DType::kF32, config, B, T);
  a2.allocate(arena, DType::kF32, config, B, T);
  std::vector<float> y1(x.size()), y2(x.size()), y_plain(x.size()), y_other(x.size());
  auto t = [&](std::vector<float>& v) { return Tensor{v.data(), {B, T, C}, DType::kF32, Device::kCPU}; };
  Ops& ops = cpu_ops();
  block_forward(ops, config, weights, t(x), t(y1), a1, dropout, 1);
  block_forward(ops, config, weights, t(x), t(y2), a2, dropout, 1);
  CHECK(y1 == y2);
  block_forward(ops, config, weights, t(x), t(y_plain), a2);
  CHECK(y1 != y_plain);
  block_forward(ops, config, weights, t(x), t(y_other), a2, dropout, 0);
  CHECK(y1 != y_other);  // another layer, other masks
  CHECK_THROWS_AS(block_forward(ops, config, weights, t(x), t(y2), a2, dropout), std::invalid_argument);
}

// Per-sequence mean losses of the model's last forward.
std::vector<double> sequence_losses(const GPT2<double>& model, int B, int T) {
  std::vector<double> out(B, 0.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) out[b] += model.token_losses()[b * T + t] / T;
  return out;
}

TEST_CASE("masks follow the window, not the slot: two micro-batches of 2 equal one batch of 4") {
  const GPTConfig config = tiny_config();
  const int T = config.seq_len;
  const auto inputs = tokens(4 * T, config.vocab, 37, 11), targets = tokens(4 * T, config.vocab, 53, 7);
  const std::vector<int64_t> windows = {100, 101, 102, 103};
  GPT2<double> whole(config, 4), half(config, 2);
  whole.init(3);
  half.params = whole.params;
  whole.set_dropout(0.1, 0.1, 21);
  half.set_dropout(0.1, 0.1, 21);

  whole.zero_grad();
  whole.forward(inputs.data(), targets.data(), windows.data());
  whole.backward(1.0);
  const auto want = sequence_losses(whole, 4, T);

  half.zero_grad();
  std::vector<double> got;
  for (int m = 0; m < 2; ++m) {
    half.forward(inputs.data() + 2 * m * T, targets.data() + 2 * m * T, windows.data() + 2 * m);
    half.backward(0.5);  // the mean over 4 sequences is the mean of the two micro-batch means
    for (double l : sequence_losses(half, 2, T)) got.push_back(l);
  }
  for (int b = 0; b < 4; ++b) {
    CAPTURE(b);
    CHECK(std::fabs(got[b] - want[b]) <= 1e-12 * std::fabs(want[b]));
  }
  double worst = 0, scale = 0;
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    worst = std::max(worst, std::fabs(half.grads[i] - whole.grads[i]));
    scale = std::max(scale, std::fabs(whole.grads[i]));
  }
  CHECK(worst <= 1e-12 * scale);

  // The same sequences in other slots of a micro-batch keep their masks: (102, 100) in slots (0, 1).
  std::vector<int32_t> in2(2 * T), tg2(2 * T);
  for (int t = 0; t < T; ++t) {
    in2[t] = inputs[2 * T + t], tg2[t] = targets[2 * T + t];
    in2[T + t] = inputs[t], tg2[T + t] = targets[t];
  }
  const std::vector<int64_t> swapped = {102, 100};
  half.forward(in2.data(), tg2.data(), swapped.data());
  const auto moved = sequence_losses(half, 2, T);
  CHECK(std::fabs(moved[0] - want[2]) <= 1e-12 * std::fabs(want[2]));
  CHECK(std::fabs(moved[1] - want[0]) <= 1e-12 * std::fabs(want[0]));
  // And a different window gives a different mask, hence a different loss.
  const std::vector<int64_t> other = {202, 200};
  half.forward(in2.data(), tg2.data(), other.data());
  CHECK(sequence_losses(half, 2, T)[0] != moved[0]);
}

}  // namespace
}  // namespace gpt::test
