// Checkpoints of the ZeRO engine: each rank's fp32 master, Adam m and v shard in one file, and a manifest
// with the model, the world size, the ZeRO configuration, the partition, the training position and the sha256
// of every file. A save goes to a temporary directory that is renamed into place (DIR/global_step{N}) before
// DIR/latest is replaced, so a crash at any point leaves the previous checkpoint loadable. A load at another
// world size repartitions: each rank reads the ranges it now owns from whichever old shard files hold them.
//
// Layout of a shard file (native little-endian fp32, no header): master[S] m[S] v[S], S = the old partition's
// shard_total; unit u's piece starts at its shard_offset in each array.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "zero/checkpoint_manifest.h"
#include "zero/engine.h"
#include "zero/loss_scaler.h"

namespace gpt {

// Collective over the engine's communicator. Writes DIR/global_step{iteration} and points DIR/latest at it;
// then removes the oldest checkpoints so that `keep` remain (0 keeps all). Returns the checkpoint's path.
// The environment variable GPT_CHECKPOINT_FAULT = shards | manifest | rename | latest makes rank 0 exit (code
// 42) right after that point of the save: a test hook for crash consistency.
std::string save_checkpoint(ZeroEngine& engine, comm::Communicator& world, const std::string& dir,
                            const TrainingPosition& position, int keep);

struct LoadedCheckpoint {
  std::string path;
  TrainingPosition position;
  int64_t applied_steps = 0;
  LossScaler::State scaler{};
  int saved_world_size = 0;
  std::string feedback_note;  // why LoCo's kept errors start from zero, if they do (see load_checkpoint)
};

// Collective: whether DIR holds a checkpoint to resume (DIR/latest or DIR/manifest.json), as rank 0 sees it.
// A folder that is missing or has neither is false: the first start of a job whose --load is its --save.
bool checkpoint_exists(comm::Communicator& world, const std::string& dir);

// Collective. Resolves DIR/latest (or DIR itself when it is a checkpoint directory), checks the manifest
// against the engine's model and the sha256 of every shard file read, and loads the master weights; unless
// weights_only, also Adam's moments, the step count, the loss scaler and LoCo's kept errors (those only from
// a run with the same world and buckets; otherwise they start from zero and feedback_note says so). Throws
// CheckpointError.
LoadedCheckpoint load_checkpoint(ZeroEngine& engine, comm::Communicator& world, const std::string& dir,
                                 bool weights_only);

// Single process, no MPI (gpt_export, gpt_generate): the model shape from the manifest and the full fp32
// master weights in the model layout, reassembled from every shard file (each checked against its sha256).
struct CheckpointWeights {
  GPTConfig model;
  std::vector<float> params;
};
CheckpointWeights read_checkpoint_weights(const std::string& dir);

}  // namespace gpt
