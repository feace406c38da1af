// The activation formulas (train/activation_formulas.h): the restated count equals what the layer loop
// allocates (LayerLoop::activation_bytes, and the arena's "activations" category but for alignment) at t = 1,
// 2 and 4, with and without sequence parallelism, for every recomputation; the paper's closed forms equal the
// sum of Section 4.1's tensors and give the paper's own figures.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed_precision_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/model/flat_model.h"
#include "train/activation_formulas.h"
#include "train/planner.h"

namespace {

using gpt::ActivationSetup;
using gpt::ActivationShape;
using gpt::Recompute;

// 5 layers, so that uniform chunks of 2 leave a shorter last one.
constexpr int kLayers = 5;

// Rank r of a group of t that never communicates: the loop's constructor only sizes its tensors.
class SizedGroup final : public gpt::TensorGroup {
 public:
  SizedGroup(int size, int rank) : size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce(const gpt::Tensor&, gpt::TensorTraffic) override { fail(); }
  void all_gather(const gpt::Tensor&, const gpt::Tensor&, gpt::TensorTraffic) override { fail(); }
  void reduce_scatter(const gpt::Tensor&, const gpt::Tensor&, gpt::TensorTraffic) override { fail(); }

 private:
  static void fail() { throw std::logic_error("SizedGroup does not communicate"); }
  int size_, rank_;
};

const Recompute kRecomputes[] = {
    Recompute{},
    Recompute::selective(),
    Recompute::full(),
    Recompute::full(gpt::RecomputeMethod::kUniform, 2),
    Recompute::full(gpt::RecomputeMethod::kBlock, 2),
};

// Every recomputation, and full recomputation's with partitioned checkpoints where they apply.
std::vector<std::pair<Recompute, bool>> variants(int t, bool sp) {
  std::vector<std::pair<Recompute, bool>> out;
  for (const Recompute& recompute : kRecomputes) out.emplace_back(recompute, false);
  for (const Recompute& recompute : kRecomputes) {
    if (t > 1 && !sp && recompute.is_full()) out.emplace_back(recompute, true);
  }
  return out;
}

// The arena's "activations" category after building the loop, and the loop's own count.
struct Allocated {
  size_t loop_bytes = 0, arena_bytes = 0, arena_blocks = 0;
};

template <typename Real>
Allocated allocate_loop(const gpt::GPTConfig& config, int B, const ActivationSetup& setup,
                        gpt::Ops& ops = gpt::cpu_ops(), gpt::DType compute = gpt::dtype_of<Real>()) {
  SizedGroup group(setup.t, setup.t - 1);  // the last rank: every rank allocates the same shapes
  gpt::Arena arena;
  gpt::LayerLoop<Real> loop(config, B, setup.recompute, ops, arena, 1,
                            gpt::TensorParallel{setup.t > 1 ? &group : nullptr, setup.sequence_parallel,
                                                setup.distribute_saved_activations},
                            std::nullopt, compute);
  Allocated a;
  a.loop_bytes = loop.activation_bytes();
  for (const auto& usage : arena.usage_by_category()) {
    if (usage.category != "activations") continue;
    a.arena_bytes = usage.current_bytes;
    a.arena_blocks = usage.blocks;
  }
  return a;
}

}  // namespace

TEST_CASE("with a backend that fuses the classifier the restated count holds its chunk, at t = 1 only") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  gpt::test::Fusing<gpt::CpuOps> fusing;
  // B = 80: 1280 rows, more than a chunk's 1024.
  for (int B : {2, 80}) {
    for (int t : {1, 2}) {
      CAPTURE(B);
      CAPTURE(t);
      ActivationSetup setup{t, false, Recompute{}};
      setup.classifier_rows = gpt::classifier_chunk_rows(int64_t(B) * config.seq_len);
      const gpt::RestatedActivations restated =
          gpt::restated_activations(gpt::activation_shape(config, B), setup);
      const Allocated fused = allocate_loop<float>(config, B, setup, fusing);
      CHECK(restated.total_bytes == int64_t(fused.loop_bytes));
      // Against the whole logits: the chunk's rows instead of B*T at t = 1; tensor parallelism keeps them.
      ActivationSetup whole = setup;
      whole.classifier_rows = 0;
      const int64_t saved = (int64_t(B) * config.seq_len - setup.classifier_rows) * config.padded_vocab() * 4;
      CHECK(gpt::restated_activations(gpt::activation_shape(config, B), whole).total_bytes ==
            restated.total_bytes + (t == 1 ? saved : 0));
    }
  }
}

TEST_CASE("the restated count is what the layer loop allocates at every t, with and without SP") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  for (int B : {1, 2}) {
    for (int t : {1, 2, 4}) {
      for (bool sp : {false, true}) {
        if (sp && t == 1) continue;  // not a configuration: Megatron turns it off
        for (const auto& variant : variants(t, sp)) {
          const auto& recompute = variant.first;
          const bool partitioned = variant.second;
          CAPTURE(B);
          CAPTURE(t);
          CAPTURE(sp);
          CAPTURE(recompute.describe());
          CAPTURE(partitioned);
          const ActivationSetup setup{t, sp, recompute, partitioned};
          const gpt::RestatedActivations restated =
              gpt::restated_activations(gpt::activation_shape(config, B), setup);
          const Allocated a = allocate_loop<float>(config, B, setup);
          CHECK(restated.total_bytes == int64_t(a.loop_bytes));
          // The arena rounds each allocation up to its alignment.
          CHECK(a.arena_bytes >= a.loop_bytes);
          CHECK(a.arena_bytes - a.loop_bytes < gpt::Arena::kAlignment * a.arena_blocks);
          int64_t sum = 0;
          for (const char* group : {"layers", "input/output", "working"}) sum += restated.bytes_of(group);
          CHECK(sum == restated.total_bytes);
        }
      }
    }
  }
  // The planner's count at t = 1 (its own sum, in elements) agrees.
  for (const Recompute& recompute : kRecomputes) {
    CAPTURE(recompute.describe());
    CHECK(gpt::restated_activations(gpt::activation_shape(config, 2), ActivationSetup{1, false, recompute})
              .total_bytes == 4 * gpt::activation_elements(config, 2, recompute));
  }
  // fp64 loops (the gradient checks'): 8 bytes per element.
  const ActivationSetup setup{2, true, Recompute::selective()};
  CHECK(gpt::restated_activations(gpt::activation_shape(config, 2), setup, 8).total_bytes ==
        int64_t(allocate_loop<double>(config, 2, setup).loop_bytes));
}

TEST_CASE("the half layer loop's count: 2 bytes an activation, 4 a statistic, with either head") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  gpt::MixedPrecisionCpuOps mixed;
  for (int B : {1, 2}) {
    for (const Recompute& recompute : kRecomputes) {
      for (bool fused : {false, true}) {
        CAPTURE(B);
        CAPTURE(recompute.describe());
        CAPTURE(fused);
        ActivationSetup setup{1, false, recompute};
        if (fused) setup.classifier_rows = gpt::classifier_chunk_rows(int64_t(B) * config.seq_len);
        gpt::test::Fusing<gpt::CpuOps> fusing_fp32;
        gpt::test::Fusing<gpt::MixedPrecisionCpuOps> fusing;
        gpt::Ops& ops = fused ? static_cast<gpt::Ops&>(fusing) : mixed;
        const Allocated half = allocate_loop<float>(config, B, setup, ops, gpt::DType::kBF16);
        const int64_t restated =
            gpt::restated_activations(gpt::activation_shape(config, B), setup, 2).total_bytes;
        CHECK(restated == int64_t(half.loop_bytes));
        // Fewer bytes than the fp32 loop's, more than half of them (the statistics stay fp32).
        const int64_t fp32 = gpt::restated_activations(gpt::activation_shape(config, B), setup).total_bytes;
        CHECK(2 * restated > fp32);
        CHECK(restated < fp32);
        CHECK(int64_t(allocate_loop<float>(config, B, setup,
                                           fused ? static_cast<gpt::Ops&>(fusing_fp32) : gpt::cpu_ops())
                          .loop_bytes) == fp32);
      }
    }
  }
}

// Tensor parallelism runs the half loop too (zero/context.h): the planner's GPU count at 2 bytes is what it
// allocates at every t, with and without SP, partitioned checkpoints included.
TEST_CASE("the half layer loop's count at t = 2 and 4, with and without SP") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  gpt::MixedPrecisionCpuOps mixed;
  for (int t : {2, 4}) {
    for (bool sp : {false, true}) {
      for (const auto& variant : variants(t, sp)) {
        CAPTURE(t);
        CAPTURE(sp);
        CAPTURE(variant.first.describe());
        CAPTURE(variant.second);
        const ActivationSetup setup{t, sp, variant.first, variant.second};
        const Allocated half = allocate_loop<float>(config, 2, setup, mixed, gpt::DType::kBF16);
        CHECK(gpt::restated_activations(gpt::activation_shape(config, 2), setup, 2).total_bytes ==
              int64_t(half.loop_bytes));
      }
    }
  }
}

TEST_CASE("a training step adds nothing to the activations the loop allocated") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(kLayers);
  for (const Recompute& recompute : kRecomputes) {
    CAPTURE(recompute.describe());
    gpt::GPT2<float> model(config, 2);
    model.init(3);
    gpt::Arena arena;
    gpt::LayerLoop<float> loop(config, 2, recompute, gpt::cpu_ops(), arena);
    gpt::test::FlatSlices weights(loop.table(), model.params);
    std::vector<int32_t> x(2 * config.seq_len), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = int32_t((i * 31 + 5) % config.vocab);
      y[i] = int32_t((i * 17 + 3) % config.vocab);
    }
    const int64_t windows[2] = {0, 1};
    loop.forward(weights, x.data(), y.data(), gpt::Dropout{0.1, 0.1, 7, windows}, true);
    loop.backward(weights, weights, 1.0f);
    const int64_t restated =
        gpt::restated_activations(gpt::activation_shape(config, 2), ActivationSetup{1, false, recompute})
            .total_bytes;
    for (const auto& usage : arena.usage_by_category()) {
      if (usage.category != "activations") continue;
      CHECK(usage.peak_bytes == usage.current_bytes);
      CHECK(usage.current_bytes - restated < gpt::Arena::kAlignment * usage.blocks);
    }
  }
}

TEST_CASE("the paper's closed forms are the sum of Section 4.1's tensors") {
  const ActivationShape shape = gpt::activation_shape(gpt::test::small_parallel_model(kLayers), 2);
  const double sbh = double(shape.s) * shape.b * shape.h, core = 5.0 * shape.a * shape.s / shape.h;
  for (int t : {1, 2, 4, 8}) {
    for (bool sp : {false, true}) {
      for (const Recompute& recompute : {Recompute{}, Recompute::selective(), Recompute::full()}) {
        CAPTURE(t);
        CAPTURE(sp);
        CAPTURE(recompute.describe());
        const ActivationSetup setup{t, sp, recompute};
        double paper = 0;
        for (const gpt::LayerTerm& term : gpt::layer_terms(shape))
          paper += gpt::paper_term_bytes(term, setup);
        CHECK(paper == doctest::Approx(gpt::paper_layer_bytes(shape, setup)).epsilon(1e-12));
      }
    }
  }
  // The paper's Table 2, written out.
  auto layer = [&](int t, bool sp, const Recompute& r) {
    return gpt::paper_layer_bytes(shape, ActivationSetup{t, sp, r}) / sbh;
  };
  CHECK(layer(1, false, {}) == doctest::Approx(34 + core));
  CHECK(layer(4, false, {}) == doctest::Approx(10 + 24.0 / 4 + core / 4));
  CHECK(layer(4, true, {}) == doctest::Approx((34 + core) / 4));
  CHECK(layer(4, false, Recompute::selective()) == doctest::Approx(10 + 24.0 / 4));
  CHECK(layer(4, true, Recompute::selective()) == doctest::Approx(34.0 / 4));
  CHECK(layer(4, false, Recompute::full()) == doctest::Approx(2));
  CHECK(layer(4, true, Recompute::full()) == doctest::Approx(2.0 / 4));
  // Section 4.3 with sequence parallelism: sbh/t for the embedding's mask and 4sbh/t (1 + v/h) at the output.
  const double io = gpt::paper_input_output_bytes(shape, ActivationSetup{4, true, {}});
  CHECK(io == doctest::Approx(sbh / 4 + 4 * sbh / 4 * (1 + double(shape.v) / shape.h)));
}

TEST_CASE("the paper's figures for its models") {
  // Table 3's models (s = 2048, t = 8): {heads, hidden}.
  struct Model {
    const char* name;
    int64_t a, h;
  };
  const Model models[] = {{"22B", 64, 6144}, {"175B", 96, 12288}, {"530B", 128, 20480}, {"1T", 160, 25600}};
  for (const Model& m : models) {
    CAPTURE(m.name);
    const ActivationShape shape{2048, 1, m.h, m.a, 1, 51200};
    const double baseline = gpt::paper_layer_bytes(shape, ActivationSetup{8, false, {}});
    const double both = gpt::paper_layer_bytes(shape, ActivationSetup{8, true, Recompute::selective()});
    // "reduces activation memory by 5x" against tensor parallelism alone (between 4.9x and 6.2x here).
    CHECK(baseline / both > 4.9);
    CHECK(baseline / both < 6.3);
  }
  // GPT-3 175B: 5as/h = 80, and the attention core is 70% of a layer's activations without parallelism.
  const ActivationShape gpt3{2048, 1, 12288, 96, 96, 51200};
  const double whole = gpt::paper_layer_bytes(gpt3, ActivationSetup{});
  const double selective = gpt::paper_layer_bytes(gpt3, ActivationSetup{1, false, Recompute::selective()});
  CHECK(whole == doctest::Approx(2048.0 * 12288 * (34 + 80)));
  CHECK(1 - selective / whole == doctest::Approx(0.70).epsilon(0.01));
  // Full recomputation keeps the layer input alone: 2sbh per layer, 1/t of it with sequence parallelism.
  CHECK(gpt::paper_layer_bytes(gpt3, ActivationSetup{1, false, Recompute::full()}) == 2.0 * 2048 * 12288);
}

TEST_CASE("ours against the paper's, tensor by tensor") {
  const ActivationShape shape = gpt::activation_shape(gpt::test::small_parallel_model(kLayers), 1);
  for (const gpt::LayerTerm& term : gpt::layer_terms(shape)) {
    CAPTURE(term.paper_tensor);
    // fp32 where the paper stores 2 bytes; masks regenerated; our LayerNorm statistics are the one addition.
    if (term.paper_bytes > 0 && term.our_bytes > 0) CHECK(term.our_bytes == 2 * term.paper_bytes);
    if (term.paper_tensor.find("mask") != std::string::npos) CHECK(term.our_bytes == 0);
    if (term.paper_bytes == 0) CHECK(term.our_tensor.find("rstd") != std::string::npos);
  }
}
