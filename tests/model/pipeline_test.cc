// The pipeline split (model/pipeline.h): even, uneven (Megatron's first/last stage counts) and interleaved
// splits cover every layer once, in order, with the embeddings on the first chunk and the head on the last;
// each layout rule is reported in one line that names its flag.
#include "model/pipeline.h"

#include <doctest/doctest.h>

#include <string>

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

}  // namespace
}  // namespace gpt
