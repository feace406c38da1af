// Pipeline parallelism's split of GPT-2 into stages; see pipeline.h.
#include "model/pipeline.h"

#include <string>

namespace gpt {
namespace {

std::string str(int n) {
  return std::to_string(n);
}

// Layers per stage, first to last (without interleaving): the given first and last counts, the rest shared
// evenly by the stages without a given count. Empty when they do not split.
std::vector<int> stage_layers(int layers, const PipelineLayout& l) {
  const int p = l.stages;
  if (p == 1) return {layers};
  const int first = l.first_stage_layers, last = l.last_stage_layers;
  const int shared_stages = p - (first > 0) - (last > 0);
  const int shared_layers = layers - first - last;
  if (shared_stages == 0) return shared_layers == 0 ? std::vector<int>{first, last} : std::vector<int>{};
  if (shared_layers < shared_stages || shared_layers % shared_stages != 0) return {};
  std::vector<int> counts(size_t(p), shared_layers / shared_stages);
  if (first > 0) counts.front() = first;
  if (last > 0) counts.back() = last;
  return counts;
}

// What the uneven flags split, in words: "12 layers over 4 stages", "12 - 3 (first) layers over 3 stages".
std::string split_words(int layers, const PipelineLayout& l) {
  const int p = l.stages;
  std::string what = str(layers);
  if (l.first_stage_layers > 0) what += " - " + str(l.first_stage_layers) + " (first stage)";
  if (l.last_stage_layers > 0) what += " - " + str(l.last_stage_layers) + " (last stage)";
  const int shared = p - (l.first_stage_layers > 0) - (l.last_stage_layers > 0);
  return what + " layers over " + str(shared) + " stage" + (shared == 1 ? "" : "s");
}

void add_interleaving_problems(const GPTConfig& model, const PipelineLayout& l, Problems& found) {
  const int L = model.num_layers, p = l.stages, V = l.layers_per_virtual_stage;
  if (V < 0) {
    found.push_back("--num-layers-per-virtual-pipeline-stage must be positive, got " + str(V));
  } else if (p < 2) {
    found.push_back("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size 2 or more");
  } else if (l.first_stage_layers > 0 || l.last_stage_layers > 0) {
    found.push_back(
        "--num-layers-per-virtual-pipeline-stage takes an even split: drop "
        "--decoder-first-pipeline-num-layers "
        "and --decoder-last-pipeline-num-layers, or drop it (1F1B)");
  } else if (L % (p * V) != 0) {
    found.push_back("--num-layers-per-virtual-pipeline-stage " + str(V) + ": " + str(L) +
                    " layers do not split into chunks of " + str(V) + " layers for each of " + str(p) +
                    " stages; choose V so that p x V divides --num-layers");
  } else if (L / (p * V) < 2) {
    found.push_back("--num-layers-per-virtual-pipeline-stage " + str(V) +
                    " gives each stage one chunk (no interleaving): drop it for 1F1B, or choose a V below " +
                    str(L / p));
  }
}

}  // namespace

int PipelineLayout::virtual_stages(const GPTConfig& model) const {
  return layers_per_virtual_stage > 0 ? model.num_layers / (stages * layers_per_virtual_stage) : 1;
}

Problems PipelineLayout::problems(const GPTConfig& model) const {
  Problems found;
  const int L = model.num_layers, p = stages;
  if (p < 1) return {"--pipeline-model-parallel-size must be at least 1, got " + str(p)};
  if (first_stage_layers < 0 || last_stage_layers < 0) {
    found.push_back(
        "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers must be positive");
  } else if (p == 1 && (first_stage_layers > 0 || last_stage_layers > 0)) {
    found.push_back(
        "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers need "
        "--pipeline-model-parallel-size 2 or more");
  } else if (p > L) {
    found.push_back("--pipeline-model-parallel-size " + str(p) + " exceeds --num-layers " + str(L) +
                    ": every stage needs a layer; choose at most " + str(L) + " stages");
  } else if (stage_layers(L, *this).empty()) {
    const bool uneven = first_stage_layers > 0 || last_stage_layers > 0;
    found.push_back("--num-layers " + str(L) + " does not split into " + str(p) + " pipeline stages (" +
                    split_words(L, *this) + ", each at least one): " +
                    (uneven
                         ? "change --decoder-first-pipeline-num-layers or --decoder-last-pipeline-num-layers"
                         : "choose a --pipeline-model-parallel-size that divides it, or give "
                           "--decoder-first-pipeline-num-layers or --decoder-last-pipeline-num-layers"));
  }
  if (layers_per_virtual_stage != 0) add_interleaving_problems(model, *this, found);
  return found;
}

std::vector<PipelineChunk> pipeline_chunks(const GPTConfig& model, const PipelineLayout& layout) {
  const int p = layout.stages, v = layout.virtual_stages(model);
  std::vector<int> counts;
  if (v == 1) {
    counts = stage_layers(model.num_layers, layout);
  } else {
    counts.assign(size_t(p * v), layout.layers_per_virtual_stage);
  }
  std::vector<PipelineChunk> chunks;
  int layer = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    PipelineChunk chunk;
    chunk.stage = int(c) % p;
    chunk.first_layer = layer;
    chunk.end_layer = layer += counts[c];
    chunk.embedding = c == 0;
    chunk.head = c + 1 == counts.size();
    chunks.push_back(chunk);
  }
  return chunks;
}

double chunk_flops_per_token(const GPTConfig& model, const PipelineChunk& chunk) {
  const double C = model.hidden, T = model.seq_len;
  const double layer = 6.0 * (12.0 * C * C + 13.0 * C) + 12.0 * C * T;
  return chunk.layers() * layer + (chunk.head ? 6.0 * (double(model.padded_vocab()) * C + 2.0 * C) : 0.0);
}

bool holds_unit(const ParamTable& whole, const std::vector<PipelineChunk>& chunks, int unit) {
  for (const PipelineChunk& c : chunks) {
    if (unit == ParamTable::kWte && (c.embedding || c.head)) return true;
    if (unit == ParamTable::kWpe && c.embedding) return true;
    if (unit == whole.final_norm_unit() && c.head) return true;
    if (c.layers() > 0 && unit >= whole.block_unit(c.first_layer) &&
        unit < whole.block_units(c.end_layer - 1).first + whole.block_units(c.end_layer - 1).count())
      return true;
  }
  return false;
}

ParamTable stage_param_table(const ParamTable& whole, const std::vector<PipelineChunk>& chunks) {
  ParamTable stage = whole;
  stage.pipeline_stage = true;
  stage.total = 0;
  std::vector<int64_t> moved(whole.units.size());  // each unit's new offset minus its old
  for (size_t u = 0; u < whole.units.size(); ++u) {
    UnitInfo& unit = stage.units[u];
    unit.offset = stage.total;
    moved[u] = unit.offset - whole.units[u].offset;
    if (!holds_unit(whole, chunks, int(u))) unit.numel = 0;
    stage.total += unit.numel;
  }
  for (ParamInfo& p : stage.params) {
    p.offset += moved[size_t(p.unit)];
    if (stage.units[size_t(p.unit)].numel == 0) {
      p.offset = stage.units[size_t(p.unit)].offset;
      p.numel = 0;
      p.shape = {0};
    }
  }
  return stage;
}

std::vector<PipelineChunk> stage_chunks(const GPTConfig& model, const PipelineLayout& layout, int stage) {
  std::vector<PipelineChunk> mine;
  for (const PipelineChunk& c : pipeline_chunks(model, layout)) {
    if (c.stage == stage) mine.push_back(c);
  }
  return mine;
}

ParamTable rank_param_table(const GPTConfig& model, int tile_factor, TensorSlice slice,
                            const PipelineLayout& layout, int stage) {
  const ParamTable whole = make_param_table(model, tile_factor, slice);
  if (layout.stages == 1) return whole;
  return stage_param_table(whole, stage_chunks(model, layout, stage));
}

}  // namespace gpt
