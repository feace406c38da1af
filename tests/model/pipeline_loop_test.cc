// The layer loop over pipeline chunks (model/loop.h with a PipelineChunk), in one process: the chunks of a
// layout run one after another, each stage with its own copy of the weights and its own gradients, the
// activations and their gradients handed across each boundary as the point-to-point messages will. Two
// accumulated micro-steps with dropout on give the whole model's losses and every gradient bit for bit,
// except the tied wte's, whose two halves (the embedding's on the first stage, the head's on the last) are
// summed in another order: within 1e-6. Even, uneven and interleaved splits, selective and full
// recomputation, tiling; and a chunk allocates residual slots for its own layers only.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/init.h"
#include "model/loop.h"
#include "model/pipeline.h"
#include "tests/model/flat_model.h"

namespace gpt {
namespace {

constexpr int kB = 2;

struct Result {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per stage, in the whole model's layout (one stage: the whole)
};

// Two micro-steps over `chunks` (all of them; one chunk: the whole model), each stage s with its weights
// and gradients in slices[s].
Result run(const GPTConfig& config, const std::vector<PipelineChunk>& chunks, int stages,
           const Recompute& recompute, int tile_factor) {
  const ParamTable table = make_param_table(config, tile_factor);
  std::vector<float> weights(size_t(table.total));
  init_gpt2_params(config, table, 7, 0, table.total, weights.data());
  Ops& ops = cpu_ops();
  Arena arena;
  std::vector<std::unique_ptr<LayerLoop<float>>> loops;
  for (const PipelineChunk& c : chunks) {
    const bool whole = chunks.size() == 1;
    loops.push_back(
        std::make_unique<LayerLoop<float>>(config, kB, recompute, ops, arena, tile_factor, TensorParallel{},
                                           whole ? std::nullopt : std::optional<PipelineChunk>(c)));
  }
  std::vector<std::unique_ptr<test::FlatSlices>> slices;
  for (int s = 0; s < stages; ++s) slices.push_back(std::make_unique<test::FlatSlices>(table, weights));
  Result r;
  for (int step = 0; step < 2; ++step) {
    const int n = kB * config.seq_len;
    const std::vector<int32_t> x = test::lcg_tokens(n, config.vocab, 30 + step),
                               y = test::lcg_tokens(n, config.vocab, 40 + step);
    const int64_t windows[kB] = {5 + 2 * step, 6 + 2 * step};
    const Dropout dropout{0.1, 0.1, 77, windows};
    float loss = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (c > 0) ops.copy(loops[c]->chunk_input(), loops[c - 1]->chunk_output());
      loss = loops[c]->forward(*slices[size_t(chunks[c].stage)], x.data(), y.data(), dropout, true);
    }
    r.losses.push_back(loss);
    for (size_t c = chunks.size(); c-- > 0;) {
      if (c + 1 < chunks.size()) ops.copy(loops[c]->boundary_gradient(), loops[c + 1]->boundary_gradient());
      test::FlatSlices& stage = *slices[size_t(chunks[c].stage)];
      loops[c]->backward(stage, stage, 0.5f);
    }
  }
  for (const auto& s : slices) r.grads.push_back(s->grads);
  return r;
}

void check_layout(const PipelineLayout& layout, const Recompute& recompute, int tile_factor) {
  const GPTConfig config = test::small_parallel_model(4);
  REQUIRE(layout.problems(config).empty());
  const ParamTable table = make_param_table(config, tile_factor);
  const Result whole = run(config, {PipelineChunk{0, 0, 4, true, true}}, 1, recompute, tile_factor);
  const Result split = run(config, pipeline_chunks(config, layout), layout.stages, recompute, tile_factor);
  CHECK(split.losses == whole.losses);  // bit for bit
  for (size_t u = 0; u < table.units.size(); ++u) {
    const UnitInfo& unit = table.units[u];
    INFO(unit.name);
    std::vector<double> got(size_t(unit.numel), 0.0);
    int holders = 0;
    for (int s = 0; s < layout.stages; ++s) {
      if (!holds_unit(table, stage_chunks(config, layout, s), int(u))) continue;
      ++holders;
      for (int64_t i = 0; i < unit.numel; ++i)
        got[size_t(i)] += split.grads[size_t(s)][size_t(unit.offset + i)];
    }
    double worst = 0, largest = 0;
    bool identical = true;
    for (int64_t i = 0; i < unit.numel; ++i) {
      const float want = whole.grads[0][size_t(unit.offset + i)];
      identical = identical && float(got[size_t(i)]) == want;
      worst = std::max(worst, std::fabs(got[size_t(i)] - want));
      largest = std::max(largest, double(std::fabs(want)));
    }
    if (u == size_t(ParamTable::kWte) && holders == 2) {
      CHECK(worst <= 1e-6 * largest);
    } else {
      CHECK(holders == 1);
      CHECK(identical);
    }
  }
}

TEST_CASE("pipeline chunks in one process train as the whole model: losses and gradients bit for bit") {
  const Recompute none;
  check_layout({.stages = 2}, none, 1);
  check_layout({.stages = 4}, none, 1);
  check_layout({.stages = 2, .first_stage_layers = 3}, none, 1);
  check_layout({.stages = 3, .first_stage_layers = 2, .last_stage_layers = 1}, none, 1);
  check_layout({.stages = 2, .layers_per_virtual_stage = 1}, none, 1);  // interleaved, v = 2
}

TEST_CASE("pipeline chunks with selective recomputation and with tiling") {
  check_layout({.stages = 2}, Recompute::selective(), 1);
  check_layout({.stages = 2, .last_stage_layers = 1}, Recompute{}, 2);
}

TEST_CASE("pipeline chunks with full recomputation, its chunks of blocks counted in each stage") {
  check_layout({.stages = 2}, Recompute::full(), 1);
  check_layout({.stages = 2, .first_stage_layers = 3}, Recompute::full(RecomputeMethod::kUniform, 2), 1);
  check_layout({.stages = 2}, Recompute::full(RecomputeMethod::kBlock, 1), 2);
  check_layout({.stages = 2, .layers_per_virtual_stage = 1}, Recompute::full(), 1);
}

TEST_CASE("a pipeline chunk keeps the residual slots of its own layers only") {
  const GPTConfig config = test::small_parallel_model(4);
  Arena whole_arena, chunk_arena;
  const LayerLoop<float> whole(config, 2, Recompute{}, cpu_ops(), whole_arena);
  const LayerLoop<float> half(config, 2, Recompute{}, cpu_ops(), chunk_arena, 1, TensorParallel{},
                              PipelineChunk{1, 2, 4, false, true});
  const size_t slot = size_t(2) * config.seq_len * config.hidden * sizeof(float);  // one [B, T, C]
  // Layers 2 and 3 keep 3 inputs and outputs of 5, and 2 block activation sets of 4; no embedding.
  CHECK(half.activation_bytes() < whole.activation_bytes() - 2 * slot);
}

}  // namespace
}  // namespace gpt
