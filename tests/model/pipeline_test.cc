// The pipeline split (model/pipeline.h): even, uneven (Megatron's first/last stage counts) and interleaved
// splits cover every layer once, in order, with the embeddings on the first chunk and the head on the last;
// each layout rule is reported in one line that names its flag.
#include "model/pipeline.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/init.h"
#include "tests/model/flat_model.h"

namespace gpt {
namespace {

GPTConfig layers(int n) {
  GPTConfig c;
  c.num_layers = n;
  return c;
}

// The chunks tile [0, L) in pipeline order, stage c % p, embeddings first and head last.
void check_tiles(const GPTConfig& model, const PipelineLayout& layout) {
  const std::vector<PipelineChunk> chunks = pipeline_chunks(model, layout);
  REQUIRE(chunks.size() == size_t(layout.stages * layout.virtual_stages(model)));
  int next = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    CHECK(chunks[c].stage == int(c) % layout.stages);
    CHECK(chunks[c].first_layer == next);
    CHECK(chunks[c].layers() >= 1);
    CHECK(chunks[c].embedding == (c == 0));
    CHECK(chunks[c].head == (c + 1 == chunks.size()));
    next = chunks[c].end_layer;
  }
  CHECK(next == model.num_layers);
}

std::vector<int> counts(const GPTConfig& model, const PipelineLayout& layout) {
  std::vector<int> n;
  for (const PipelineChunk& c : pipeline_chunks(model, layout)) n.push_back(c.layers());
  return n;
}

TEST_CASE("even, uneven and interleaved splits cover every layer once, in order") {
  CHECK(counts(layers(12), {.stages = 1}) == std::vector<int>{12});
  CHECK(counts(layers(12), {.stages = 4}) == std::vector<int>{3, 3, 3, 3});
  // GPT-2 124M's head costs about 5.5 layers: the last stage gets fewer.
  CHECK(counts(layers(12), {.stages = 2, .last_stage_layers = 3}) == std::vector<int>{9, 3});
  CHECK(counts(layers(12), {.stages = 4, .first_stage_layers = 4, .last_stage_layers = 2}) ==
        std::vector<int>{4, 3, 3, 2});
  CHECK(counts(layers(12), {.stages = 3, .first_stage_layers = 2}) == std::vector<int>{2, 5, 5});
  CHECK(counts(layers(12), {.stages = 2, .layers_per_virtual_stage = 3}) == std::vector<int>{3, 3, 3, 3});
  for (const PipelineLayout& l :
       {PipelineLayout{.stages = 1}, PipelineLayout{.stages = 4}, PipelineLayout{.stages = 12},
        PipelineLayout{.stages = 2, .last_stage_layers = 3},
        PipelineLayout{.stages = 4, .first_stage_layers = 4, .last_stage_layers = 2},
        PipelineLayout{.stages = 2, .layers_per_virtual_stage = 2},
        PipelineLayout{.stages = 3, .layers_per_virtual_stage = 2}}) {
    CAPTURE(l.stages);
    REQUIRE(l.problems(layers(12)).empty());
    check_tiles(layers(12), l);
  }
}

TEST_CASE("the chunks' FLOPs per token add up to the model's") {
  const GPTConfig model = layers(12);
  for (const PipelineLayout& l : {PipelineLayout{.stages = 1}, PipelineLayout{.stages = 4},
                                  PipelineLayout{.stages = 2, .last_stage_layers = 3},
                                  PipelineLayout{.stages = 2, .layers_per_virtual_stage = 2}}) {
    double sum = 0;
    for (const PipelineChunk& c : pipeline_chunks(model, l)) sum += chunk_flops_per_token(model, c);
    CHECK(sum == doctest::Approx(model.model_flops_per_token()).epsilon(1e-12));
  }
}

TEST_CASE("an interleaved stage holds every p-th chunk") {
  const GPTConfig model = layers(12);
  const PipelineLayout layout{.stages = 2, .layers_per_virtual_stage = 2};
  CHECK(layout.virtual_stages(model) == 3);
  const std::vector<PipelineChunk> second = stage_chunks(model, layout, 1);
  REQUIRE(second.size() == 3);
  CHECK(second[0].first_layer == 2);
  CHECK(second[1].first_layer == 6);
  CHECK(second[2].first_layer == 10);
  CHECK(second[2].head);
  CHECK(stage_chunks(model, layout, 0)[0].embedding);
}

// The first problem of a layout, which must name `flag`.
void check_refused(const GPTConfig& model, const PipelineLayout& layout, const std::string& flag) {
  const Problems found = layout.problems(model);
  REQUIRE(!found.empty());
  INFO(found.front());
  CHECK(found.front().find(flag) != std::string::npos);
}

TEST_CASE("layouts that do not split are refused in one line naming the flag") {
  const GPTConfig model = layers(12);
  check_refused(model, {.stages = 5}, "--num-layers 12 does not split into 5 pipeline stages");
  check_refused(model, {.stages = 13}, "exceeds --num-layers 12");
  check_refused(model, {.stages = 0}, "--pipeline-model-parallel-size must be at least 1");
  check_refused(model, {.stages = 3, .first_stage_layers = 3}, "--decoder-first-pipeline-num-layers");
  check_refused(model, {.stages = 2, .first_stage_layers = 5, .last_stage_layers = 5}, "does not split");
  check_refused(model, {.stages = 3, .first_stage_layers = 6, .last_stage_layers = 6}, "does not split");
  check_refused(model, {.stages = 1, .last_stage_layers = 2}, "need --pipeline-model-parallel-size 2");
  check_refused(model, {.stages = 2, .layers_per_virtual_stage = 4},
                "--num-layers-per-virtual-pipeline-stage 4: 12 layers do not split");
  check_refused(model, {.stages = 2, .layers_per_virtual_stage = 6}, "gives each stage one chunk");
  check_refused(model, {.stages = 1, .layers_per_virtual_stage = 2},
                "needs --pipeline-model-parallel-size 2");
  check_refused(model, {.stages = 2, .last_stage_layers = 4, .layers_per_virtual_stage = 2},
                "takes an even split");
}

// Every unit is held by exactly one stage, but wte by the first and the last; a held unit keeps its size,
// and a stage's held units are packed in order.
void check_stage_tables(const GPTConfig& model, const PipelineLayout& layout, const ParamTable& whole) {
  std::vector<int> holders(whole.units.size(), 0);
  for (int s = 0; s < layout.stages; ++s) {
    const ParamTable stage = stage_param_table(whole, stage_chunks(model, layout, s));
    REQUIRE(stage.units.size() == whole.units.size());
    REQUIRE(stage.params.size() == whole.params.size());
    int64_t next = 0;
    for (size_t u = 0; u < whole.units.size(); ++u) {
      CHECK(stage.units[u].name == whole.units[u].name);
      CHECK(stage.units[u].offset == next);
      if (stage.units[u].numel > 0) {
        CHECK(stage.units[u].numel == whole.units[u].numel);
        ++holders[u];
      }
      next += stage.units[u].numel;
    }
    CHECK(stage.total == next);
    for (size_t k = 0; k < whole.params.size(); ++k) {
      const ParamInfo &p = stage.params[k], &w = whole.params[k];
      CHECK(p.name == w.name);
      CHECK(p.full_shape == w.full_shape);
      if (p.numel == 0) continue;
      CHECK(p.numel == w.numel);
      CHECK(p.offset - stage.units[size_t(p.unit)].offset == w.offset - whole.units[size_t(w.unit)].offset);
    }
  }
  for (size_t u = 0; u < holders.size(); ++u) {
    INFO(whole.units[u].name);
    CHECK(holders[u] == (u == ParamTable::kWte && layout.stages > 1 ? 2 : 1));
  }
}

TEST_CASE("stage tables hold each unit once (wte on the first and the last stage), packed in order") {
  const GPTConfig model = test::small_parallel_model(4);
  const std::vector<PipelineLayout> layouts = {{.stages = 1},
                                               {.stages = 2},
                                               {.stages = 4},
                                               {.stages = 2, .last_stage_layers = 1},
                                               {.stages = 2, .layers_per_virtual_stage = 1}};
  for (const PipelineLayout& layout : layouts) {
    INFO("p = " << layout.stages << ", V = " << layout.layers_per_virtual_stage);
    check_stage_tables(model, layout, make_param_table(model));
    check_stage_tables(model, layout, make_param_table(model, 2));                     // tiled
    check_stage_tables(model, layout, make_param_table(model, 1, TensorSlice{2, 1}));  // a slice
  }
}

// A stage starts from the whole model's weights: each held parameter's elements equal the whole model's, bit
// for bit (the tied wte on both of its stages).
void check_stage_init(const GPTConfig& model, const PipelineLayout& layout, int tile_factor,
                      TensorSlice slice) {
  const ParamTable whole = make_param_table(model, tile_factor, slice);
  std::vector<float> all(size_t(whole.total));
  init_gpt2_params(model, whole, 42, 0, whole.total, all.data());
  for (int s = 0; s < layout.stages; ++s) {
    const ParamTable stage = stage_param_table(whole, stage_chunks(model, layout, s));
    std::vector<float> mine(size_t(stage.total), -1.0f);
    init_gpt2_params(model, stage, 42, 0, stage.total, mine.data());
    for (size_t k = 0; k < stage.params.size(); ++k) {
      const ParamInfo& p = stage.params[k];
      for (int64_t i = 0; i < p.numel; ++i) {
        if (mine[size_t(p.offset + i)] != all[size_t(whole.params[k].offset + i)]) {
          FAIL_CHECK(p.name << " element " << i << " of stage " << s);
          break;
        }
      }
    }
  }
}

TEST_CASE("a stage initializes its parameters as the whole model does, at any tile factor and slice") {
  const GPTConfig model = test::small_parallel_model(4);
  check_stage_init(model, {.stages = 2}, 1, {});
  check_stage_init(model, {.stages = 4}, 1, {});
  check_stage_init(model, {.stages = 2, .first_stage_layers = 3}, 2, {});
  check_stage_init(model, {.stages = 2}, 1, TensorSlice{2, 1});
}

}  // namespace
}  // namespace gpt
