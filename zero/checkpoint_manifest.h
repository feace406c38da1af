// The manifest of a checkpoint (DIR/global_stepN/manifest.json): the training position, the loss scaler, the
// model, the world size and ZeRO settings, the partition of every gather unit, and each shard file's name,
// size and sha256. save_checkpoint writes it; every load reads it through parse_manifest. A manifest is
// untrusted input (a user's file, perhaps truncated or edited by hand), so the reader checks every field's
// type and range and recomputes the partition from the model and the world size; what it returns, the
// loaders can trust (shard files named inside the checkpoint directory, offsets inside the shards).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/user_error.h"
#include "model/config.h"
#include "model/pipeline.h"
#include "zero/loss_scaler.h"

namespace gpt {

// A checkpoint that cannot be used: missing, truncated, altered, or made for another model. what() is one
// line naming the file and the problem; the trainer prints it and exits with code 2.
struct CheckpointError : UsageError {
  using UsageError::UsageError;
};

// The training position a checkpoint carries besides the engine's state.
struct TrainingPosition {
  int64_t iteration = 0;  // optimizer iterations done, skipped ones included (the data position is this x G)
  int64_t skipped_total = 0;  // skipped iterations so far
  int64_t global_batch = 0;   // G, sequences per iteration: a resume must use the same
  uint64_t seed = 0;          // the data order and dropout masks depend on it
};

struct CheckpointManifest {
  TrainingPosition position;
  int64_t applied_steps = 0;  // optimizer steps applied (iterations minus fp16 overflow skips)
  LossScaler::State scaler{};
  GPTConfig model;          // seq_len = max_positions
  int world_size = 0;       // all ranks: tensor_parallel x pipeline stages x the data-parallel size
  int tensor_parallel = 1;  // t ("tensor_parallel", written when above 1): each rank saved its slice
  // The pipeline's split ("pipeline", written when it has more than one stage): each stage saved its part.
  PipelineLayout pipeline;
  int stage = 0;
  std::string precision;  // precision_name(): "fp32", "fp16", "bf16", "fp64"
  int tile_factor = 1;    // memory-centric tiling's ("zero.tile_factor", written when above 1)

  // Each pipeline stage's Partition(saved_table(stage), data_parallel(), num_shards()) of the run that saved,
  // unit by unit (every tensor-parallel slice has the same units); one stage at p = 1 ("units" and
  // "shard_total"; at p > 1, "stages": [{"shard_total", "units"}, ..]).
  struct Unit {
    std::string name;
    int64_t numel = 0, shard = 0, shard_offset = 0;
  };
  struct Stage {
    std::vector<Unit> units;  // the whole model's units; those the stage does not hold have numel 0
    int64_t shard_total = 0;  // elements of each of master, m and v in one of the stage's shard files
  };
  std::vector<Stage> stages;

  // One file per shard of each tensor-parallel slice of each pipeline stage (stage-major, then slice-major):
  // master[shard_total] m[shard_total] v[shard_total] in fp32, the saved_table's layout cut as the
  // partition says.
  struct ShardFile {
    std::string name;  // a plain file name inside the checkpoint directory
    int64_t bytes = 0;
    std::string sha256;  // 64 lowercase hex digits
  };
  std::vector<ShardFile> files;
  int num_shards() const { return static_cast<int>(files.size()) / (tensor_parallel * pipeline.stages); }
  int data_parallel() const { return world_size / (tensor_parallel * pipeline.stages); }
  int file_index(int stage, int tensor_rank, int shard) const {
    return (stage * tensor_parallel + tensor_rank) * num_shards() + shard;
  }
  const ShardFile& file(int stage, int tensor_rank, int shard) const {
    return files[size_t(file_index(stage, tensor_rank, shard))];
  }
  // The parameters pipeline stage `stage`'s slice `tensor_rank` saved (rank_param_table of the run).
  ParamTable saved_table(int stage, int tensor_rank = 0) const {
    return rank_param_table(model, tile_factor, TensorSlice{tensor_parallel, tensor_rank}, pipeline, stage);
  }
  // With LoCo (qgZ's error feedback): one file per rank of its kept errors, as the engine's feedback_state()
  // (int8 blocks, opaque here); empty when the run that saved had none.
  std::vector<ShardFile> feedback_files;
  std::string feedback_layout;  // ZeroEngine::feedback_layout() of the run that saved them
};

// The name of shard file `shard` of `shards` in a checkpoint directory: "shard_00003_of_00008.bin"; with
// tensor parallelism, of slice `tensor_rank` of `tensor_size`: "shard_00003_of_00008_tp_01_of_02.bin"; with
// pipeline stages, of stage `stage` of `stages`: "shard_00003_of_00008_pp_01_of_04.bin" (after the slice's
// part when both).
std::string shard_file_name(int shard, int shards, int tensor_rank = 0, int tensor_size = 1, int stage = 0,
                            int stages = 1);

// The name of rank r's file of LoCo's kept errors: "loco_errors_00003_of_00008.bin".
std::string feedback_file_name(int rank, int ranks);

// The model shape as the manifest records it, as one line of JSON: two shapes are the same model when these
// are equal (seq_len is a training setting, not part of the shape).
std::string model_shape_text(const GPTConfig& model);

// The manifest as save_checkpoint writes it: JSON, one key per line, ending with a newline.
std::string manifest_text(const CheckpointManifest& manifest);

// Parses and checks a manifest's text; `path` names it in messages. Throws CheckpointError (one line) for
// anything but a consistent manifest of this format and version.
CheckpointManifest parse_manifest(std::string_view text, const std::string& path);

}  // namespace gpt
