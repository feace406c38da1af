// Pipeline parallelism's split of GPT-2 into stages (Megatron's flags): p stages each run a contiguous run of
// layers, the first also the embeddings and the last also the final LayerNorm and the tied LM head (whose
// wte is then held twice, on the first and the last stage). Uneven splits give the first and the last stage
// their own layer counts (--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers): the
// head of GPT-2 124M costs about as much as 5.5 of its layers, so the last stage wants fewer. The
// interleaved schedule (--num-layers-per-virtual-pipeline-stage V) cuts the model into p x v chunks of V
// layers, v = L / (p V), and stage s runs chunks s, s + p, s + 2p, ..: each stage holds v thinner slices,
// which shrinks the bubble v times at v times the point-to-point messages.
//
// Layers keep their global indices on every stage, so initialization, dropout masks and checkpoints are the
// same at any p (the split decides only who runs a layer).
#pragma once

#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace gpt {

struct PipelineLayout {
  int stages = 1;                    // p: --pipeline-model-parallel-size
  int first_stage_layers = 0;        // --decoder-first-pipeline-num-layers; 0: an even share
  int last_stage_layers = 0;         // --decoder-last-pipeline-num-layers; 0: an even share
  int layers_per_virtual_stage = 0;  // --num-layers-per-virtual-pipeline-stage; 0: 1F1B, no interleaving

  // v: the model chunks each stage runs (1 without interleaving). Meaningful when problems() is empty.
  int virtual_stages(const GPTConfig& model) const;
  // Every rule the layout breaks for the model, one line each naming the flags and the fix.
  Problems problems(const GPTConfig& model) const;
};

// A contiguous run of the model run by one stage: layers [first_layer, end_layer), and the embeddings
// before them (the pipeline's first chunk) or the final LayerNorm and the tied head after them (its last).
struct PipelineChunk {
  int stage = 0;
  int first_layer = 0, end_layer = 0;
  bool embedding = false, head = false;
  int layers() const { return end_layer - first_layer; }
  bool operator==(const PipelineChunk&) const = default;
};

// The model's p x v chunks in pipeline order (chunk c runs on stage c % p, as its (c / p)-th chunk). The
// layout must have no problems().
std::vector<PipelineChunk> pipeline_chunks(const GPTConfig& model, const PipelineLayout& layout);

// The chunks stage s runs, in the order it holds them.
std::vector<PipelineChunk> stage_chunks(const GPTConfig& model, const PipelineLayout& layout, int stage);

// Whether `chunks` run gather unit u of `whole` (a table of the whole model at any tile factor and slice):
// wte on the first chunk (the embedding) and on the last (the tied head: a second copy), wpe on the first,
// ln_f on the last, each block's units where its layer is.
bool holds_unit(const ParamTable& whole, const std::vector<PipelineChunk>& chunks, int unit);

// Training FLOPs per token of a chunk, counted as GPTConfig::model_flops_per_token counts the whole model
// (6 N + 12 L C T): its layers' 6 (12 C^2 + 13 C) + 12 C T each, the head's 6 (Vp C + 2 C) (the tied wte
// as the output projection, and ln_f); the embedding's lookup is no matrix work. The chunks' sum is the
// model's.
double chunk_flops_per_token(const GPTConfig& model, const PipelineChunk& chunk);

// A stage's table: `whole` with every unit the chunks do not run emptied (numel 0, its parameters' shape
// {0}), and the rest packed back to back in the same order. Unit and parameter indices, names and full
// shapes stay those of the whole model, so the layer loop, initialization (by whole-model index), dropout
// and checkpoints (by name) see the same model at any p; the ZeRO engine partitions only what the stage
// holds.
ParamTable stage_param_table(const ParamTable& whole, const std::vector<PipelineChunk>& chunks);

// The parameters one rank holds: tensor-parallel slice `slice` of the model at tile factor N, and of that,
// at p > 1, stage `stage`'s chunks (stage_param_table). The engine holds this table; a checkpoint's shard
// files cut it.
ParamTable rank_param_table(const GPTConfig& model, int tile_factor, TensorSlice slice,
                            const PipelineLayout& layout, int stage);

}  // namespace gpt
