// Activation recomputation at the model level (model/recompute.h): selective recomputation and full
// recomputation by every method give the loss and every gradient of the loop without recomputation bit for
// bit (fp32, hidden and attention dropout on, untiled and tiled), and the loop acquires its units in exactly
// the order loop_schedule announces, each acquisition released, each gradient handed over once; every
// residual add runs inside the next LayerNorm's op unless the sum is kept away as a checkpoint first.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/model/flat_model.h"

namespace {

using gpt::Recompute;
using gpt::RecomputeMethod;

// 5 layers, so that uniform chunks of 2 leave a shorter last one.
constexpr int kLayers = 5;

// The model's flat vectors as weight source and gradient sink, recording what the loop asks for.
class RecordingSlices final : public gpt::test::FlatSlices {
 public:
  using FlatSlices::FlatSlices;
  void begin_pass(gpt::Pass, const std::vector<int>& schedule) override {
    announced = schedule;
    acquired.clear();
  }
  gpt::WeightView acquire(int unit) override {
    acquired.push_back(unit);
    ++held_[unit];
    return FlatSlices::acquire(unit);
  }
  void release(int unit) override {
    CHECK(held_[unit] > 0);
    --held_[unit];
  }
  void ready(int unit) override { finals.push_back(unit); }
  bool all_released() const {
    for (const auto& [unit, count] : held_) {
      if (count != 0) return false;
    }
    return true;
  }

  std::vector<int> announced, acquired, finals;

 private:
  std::map<int, int> held_;
};

struct Result {
  float loss = 0;
  std::vector<float> grads;
};

// Two micro-steps of forward and backward (gradients accumulate) with dropout on.
Result run(const Recompute& recompute, int tile_factor) {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  const int B = 2, T = config.seq_len;
  gpt::GPT2<float> init(config, B);
  init.init(3);
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(config, B, recompute, gpt::cpu_ops(), arena, tile_factor);
  RecordingSlices slices(loop.table(), init.params);
  Result r;
  for (int step = 0; step < 2; ++step) {
    const std::vector<int32_t> x = gpt::test::lcg_tokens(B * T, config.vocab, 10 + step),
                               y = gpt::test::lcg_tokens(B * T, config.vocab, 20 + step);
    const int64_t windows[2] = {7 + 2 * step, 8 + 2 * step};
    gpt::Dropout dropout{0.1, 0.15, 99, windows};
    r.loss += loop.forward(slices, x.data(), y.data(), dropout, true);
    CHECK(slices.acquired == slices.announced);
    CHECK(slices.acquired == loop.schedule().forward);
    slices.finals.clear();
    loop.backward(slices, slices, 0.5f);
    CHECK(slices.acquired == slices.announced);
    CHECK(slices.acquired == loop.schedule().backward);
    CHECK(slices.finals == loop.schedule().gradients);
    CHECK(slices.all_released());
  }
  r.grads = slices.grads;
  return r;
}

// Full recomputation with its checkpoints copied to host memory and back (cpu_checkpointing; on the CPU
// backend both are host memory, but the copies run all the same).
Recompute on_host(Recompute r) {
  r.checkpoints_on_host = true;
  return r;
}

// The CPU's ops, counting the residual stream's adds and the LayerNorm forwards, nested calls apart (the
// default residual_layernorm_forward is add then layernorm_forward).
class CountingNorms final : public gpt::CpuOps {
 public:
  struct Counts {
    int fused = 0, plain = 0, adds = 0;
  };
  void residual_layernorm_forward(const gpt::Tensor& residual, const gpt::Tensor& out,
                                  const gpt::Tensor& mean, const gpt::Tensor& rstd, const gpt::Tensor& a,
                                  const gpt::Tensor& b, const gpt::Tensor& w,
                                  const gpt::Tensor& bias) override {
    ++counts.fused;
    nested_ = true;
    CpuOps::residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias);
    nested_ = false;
  }
  void layernorm_forward(const gpt::Tensor& out, const gpt::Tensor& mean, const gpt::Tensor& rstd,
                         const gpt::Tensor& x, const gpt::Tensor& w, const gpt::Tensor& b) override {
    if (!nested_) ++counts.plain;
    CpuOps::layernorm_forward(out, mean, rstd, x, w, b);
  }
  void add(const gpt::Tensor& out, const gpt::Tensor& a, const gpt::Tensor& b) override {
    if (!nested_) ++counts.adds;
    CpuOps::add(out, a, b);
  }
  Counts counts;

 private:
  bool nested_ = false;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("every recomputation gives the loss and gradients of none, bit for bit, with dropout on") {
  for (int tile_factor : {1, 2}) {
    CAPTURE(tile_factor);
    const Result none = run(Recompute{}, tile_factor);
    for (const Recompute& r :
         {Recompute::selective(), Recompute::full(), Recompute::full(RecomputeMethod::kUniform, 2),
          Recompute::full(RecomputeMethod::kUniform, 5), Recompute::full(RecomputeMethod::kBlock, 3),
          Recompute::full(RecomputeMethod::kBlock, 0), on_host(Recompute::full()),
          on_host(Recompute::full(RecomputeMethod::kUniform, 2)),
          on_host(Recompute::full(RecomputeMethod::kBlock, 3))}) {
      CAPTURE(r.describe());
      const Result other = run(r, tile_factor);
      CHECK(std::memcmp(&other.loss, &none.loss, sizeof(float)) == 0);
      CHECK(same_bits(other.grads, none.grads));
    }
  }
}

TEST_CASE("every residual add is fused with the LayerNorm after it, unless the sum is kept away first") {
  // 5 blocks. Without recomputation: LayerNorm 2 of each block, LayerNorm 1 of blocks 1-4 and the final one
  // add in their op; block 0's LayerNorm 1 reads the embedding alone. Chunks of 2 ({0,1} {2,3} {4}) with
  // their inputs in host memory: blocks 1 and 3 add on their own, as the kept inputs of blocks 2 and 4 are
  // copied away before those run; the backward recomputes each chunk from its restored input, its later
  // blocks' LayerNorm 1 fused (blocks 1 and 3) and no add.
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  const int B = 2, T = config.seq_len;
  gpt::GPT2<float> init(config, B);
  init.init(3);
  const std::vector<int32_t> x = gpt::test::lcg_tokens(B * T, config.vocab, 10),
                             y = gpt::test::lcg_tokens(B * T, config.vocab, 20);
  struct Expected {
    Recompute recompute;
    CountingNorms::Counts forward, backward;
  };
  for (const Expected& e :
       {Expected{Recompute{}, {10, 1, 0}, {0, 0, 0}},
        Expected{Recompute::full(RecomputeMethod::kUniform, 2), {10, 1, 0}, {7, 3, 0}},
        Expected{on_host(Recompute::full(RecomputeMethod::kUniform, 2)), {8, 3, 2}, {7, 3, 0}}}) {
    CAPTURE(e.recompute.describe());
    CountingNorms ops;
    gpt::Arena arena;
    gpt::LayerLoop<float> loop(config, B, e.recompute, ops, arena);
    gpt::test::FlatSlices slices(loop.table(), init.params);
    loop.forward(slices, x.data(), y.data(), gpt::Dropout{}, true);
    const CountingNorms::Counts forward = std::exchange(ops.counts, {});
    loop.backward(slices, slices, 1.0f);
    for (const auto& [got, want] : {std::pair{forward, e.forward}, std::pair{ops.counts, e.backward}}) {
      CHECK(got.fused == want.fused);
      CHECK(got.plain == want.plain);
      CHECK(got.adds == want.adds);
    }
  }
}

TEST_CASE("full recomputation walks a chunk's inner blocks forward again, then backward") {
  // 5 blocks in chunks of 2: {0,1} {2,3} {4}. Units: wte 0, wpe 1, h.l = 2 + l, ln_f 7.
  const gpt::LoopSchedule s = gpt::loop_schedule(8, 1, Recompute::full(RecomputeMethod::kUniform, 2));
  CHECK(s.backward == std::vector<int>{7, 0, 6, 4, 5, 4, 2, 3, 2});
  CHECK(s.gradients == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  // block 2: blocks 0 and 1 are recomputed alone, 2..4 keep their activations.
  const gpt::LoopSchedule b = gpt::loop_schedule(8, 1, Recompute::full(RecomputeMethod::kBlock, 2));
  CHECK(b.backward == std::vector<int>{7, 0, 6, 5, 4, 3, 2});
}

TEST_CASE("the chunks of each method") {
  const Recompute uniform = Recompute::full(RecomputeMethod::kUniform, 2);
  CHECK(uniform.chunk(3, 5).first == 2);
  CHECK(uniform.chunk(3, 5).last == 3);
  CHECK(uniform.chunk(4, 5).size() == 1);
  const Recompute block = Recompute::full(RecomputeMethod::kBlock, 2);
  CHECK(block.chunk(1, 5).size() == 1);
  CHECK(block.chunk(2, 5).empty());
  CHECK(Recompute::selective().chunk(0, 5).empty());
  CHECK(Recompute::full(RecomputeMethod::kUniform, 3).describe() == "full (uniform, 3 layers)");
}
