// The chunked classifier (Ops::classifier_forward / _backward, its default implementation that the CPU
// backend runs) against the unfused head it replaces: linear_forward over all rows, cross_entropy_forward,
// then cross_entropy_backward and linear_backward. Losses, dlnf and dwte within 1e-6 of the unfused ops'
// (relative to the reference's largest magnitude), in fp32, for chunks that divide the rows and chunks that
// do not (and one chunk of all rows, one of a single row), a padded vocabulary (V < Vp: the padding columns
// get no probability and no gradient) and dlosses that differ from row to row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "tensor/tensor.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

constexpr int64_t kN = 24, kC = 20, kVp = 128;
constexpr int kV = 100;

// A host tensor: the values and their seam view.
struct Host {
  std::vector<float> values;
  std::vector<int64_t> shape;
  Tensor tensor() { return Tensor{values.data(), shape, DType::kF32, Device::kCPU}; }
};

Host random_host(Rng& rng, std::vector<int64_t> shape, double scale) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Host{to_float(rng.vec(n, -scale, scale)), std::move(shape)};
}

// The head's inputs, and the gradients the backward accumulates into (random: both heads must add to them).
struct HeadInputs {
  Host lnf, wte, dlosses, dlnf, dwte;
  std::vector<int32_t> targets;
  // [B, T] as the layer loop holds them: a chunk's targets are elements, not rows, of this tensor.
  Tensor targets_tensor() { return Tensor{targets.data(), {4, kN / 4}, DType::kI32, Device::kCPU}; }
};

HeadInputs head_inputs() {
  Rng rng(20261127);
  // The padding rows of wte are random too: their logits must still get no probability.
  Host lnf = random_host(rng, {kN, kC}, 1.0), wte = random_host(rng, {kVp, kC}, 0.3);
  Host dlosses = random_host(rng, {kN}, 0.5), dlnf = random_host(rng, {kN, kC}, 0.1);
  Host dwte = random_host(rng, {kVp, kC}, 0.1);
  return HeadInputs{lnf, wte, dlosses, dlnf, dwte, rng.tokens(kN, kV)};
}

struct HeadOutputs {
  std::vector<float> losses, dlnf, dwte;
};

// The unfused head: the whole logits, probabilities in place, dlogits in place, then linear_backward.
HeadOutputs unfused_head(HeadInputs in) {
  Ops& ops = cpu_ops();
  Host probs{std::vector<float>(size_t(kN * kVp)), {kN, kVp}};
  Host losses{std::vector<float>(size_t(kN)), {kN}};
  ops.linear_forward(probs.tensor(), in.lnf.tensor(), in.wte.tensor(), Tensor{});
  ops.cross_entropy_forward(losses.tensor(), probs.tensor(), probs.tensor(), in.targets_tensor(), kV);
  ops.cross_entropy_backward(probs.tensor(), probs.tensor(), in.targets_tensor(), in.dlosses.tensor(), kV);
  ops.linear_backward(in.dlnf.tensor(), in.dwte.tensor(), Tensor{}, probs.tensor(), in.lnf.tensor(),
                      in.wte.tensor());
  return {losses.values, in.dlnf.values, in.dwte.values};
}

// The chunked head with `rows` rows of logits at a time: the forward's losses, then the backward's
// gradients (and the losses it writes again).
HeadOutputs chunked_head(HeadInputs in, int64_t rows, std::vector<float>* backward_losses) {
  Ops& ops = cpu_ops();
  Host scratch{std::vector<float>(size_t(rows * kVp)), {rows, kVp}};
  Host losses{std::vector<float>(size_t(kN)), {kN}};
  ops.classifier_forward(losses.tensor(), in.lnf.tensor(), in.wte.tensor(), in.targets_tensor(), kV,
                         scratch.tensor());
  Host again{std::vector<float>(size_t(kN)), {kN}};
  ops.classifier_backward(in.dlnf.tensor(), in.dwte.tensor(), again.tensor(), in.lnf.tensor(),
                          in.wte.tensor(), in.targets_tensor(), in.dlosses.tensor(), kV, scratch.tensor());
  *backward_losses = again.values;
  return {losses.values, in.dlnf.values, in.dwte.values};
}

TEST_CASE("the chunked classifier equals the unfused head within 1e-6, whatever the chunk") {
  const HeadInputs in = head_inputs();
  const HeadOutputs want = unfused_head(in);
  for (int64_t rows : {int64_t(1), int64_t(5), int64_t(8), int64_t(24), int64_t(64)}) {
    INFO("chunks of " << rows << " rows of " << kN);
    std::vector<float> backward_losses;
    const HeadOutputs got = chunked_head(in, std::min(rows, kN), &backward_losses);
    expect_relative("losses", got.losses, want.losses, 1e-6);
    expect_relative("the backward's losses", backward_losses, want.losses, 1e-6);
    expect_relative("dlnf", got.dlnf, want.dlnf, 1e-6);
    expect_relative("dwte", got.dwte, want.dwte, 1e-6);
  }
}

TEST_CASE("the padding columns of wte get no gradient from the chunked classifier") {
  HeadInputs in = head_inputs();
  const std::vector<float> before = in.dwte.values;
  std::vector<float> backward_losses;
  const HeadOutputs got = chunked_head(in, 7, &backward_losses);
  for (int64_t v = kV; v < kVp; ++v) {
    for (int64_t c = 0; c < kC; ++c) CHECK(got.dwte[size_t(v * kC + c)] == before[size_t(v * kC + c)]);
  }
}

TEST_CASE("the chunked classifier rejects shapes that disagree") {
  HeadInputs in = head_inputs();
  Host scratch{std::vector<float>(size_t(4 * (kVp - 1))), {4, kVp - 1}};
  Host losses{std::vector<float>(size_t(kN)), {kN}};
  CHECK_THROWS_AS(cpu_ops().classifier_forward(losses.tensor(), in.lnf.tensor(), in.wte.tensor(),
                                               in.targets_tensor(), kV, scratch.tensor()),
                  std::invalid_argument);
}

TEST_CASE("the CPU backend keeps the unfused head") {
  CHECK_FALSE(cpu_ops().fuses_classifier());
}

}  // namespace
}  // namespace gpt::test
