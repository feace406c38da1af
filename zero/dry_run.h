// The engine's dry run: what one rank's ZeroEngine holds in its arenas, learned by building the real engine
// (its layer loop, weight source, gatherer, gradient sink and reducer) for one rank of the given cluster and
// walking one optimizer step's schedule without arithmetic: the backend computes nothing and its memory is
// only counted (kernels/dry), the communicator is a world on paper (comm/dry_communicator.h). The planner and
// gpt_train's memory guard read their buffers from it, so the order in which the engine acquires and
// releases its buffers is written once, in the engine, and never restated beside it.
//
// The swap files of ZeRO-Infinity are not created: the dry run runs the configuration with both tiers in
// memory, whose buffers are the same (the swap buffers themselves are counted from the offload layout the
// engine allocates them by, zero/memory_model.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/pipeline.h"
#include "tensor/arena.h"
#include "zero/config.h"

namespace gpt {

struct DryRunSetup {
  GPTConfig model;
  ZeroConfig zero;
  int nodes = 1, ranks_per_node = 1;
  int tensor_parallel = 1;  // t: the world is t x d (zero/engine.h), t x d x p with pipeline stages
  int micro_batch = 1, accumulation_steps = 1;
  // Pipeline stages (p > 1): the engine of `stage`'s first rank, holding that stage's chunks and running
  // its part of the schedule over the accumulation steps as micro-batches (zero/parallel_groups.h).
  PipelineLayout pipeline;
  int stage = 0;
};

// The arenas' ledgers after the dry steps: each category's peak, in device and in wire memory.
struct DryRunMemory {
  std::vector<Arena::CategoryUsage> device, wire;
  size_t activation_bytes = 0;  // the layer loop's own count (without the arena's rounding)
  // A category's peak in device and wire memory added (0 when absent).
  size_t peak(const std::string& category) const;
  // The parts of a category ("buffers" has "buffers: gathered units", ...) by their names after the colon,
  // in the order first used, each with its device and wire peaks added.
  std::vector<std::pair<std::string, size_t>> parts(const std::string& category) const;
};

// Rank 0's engine of the setup's world, or at p > 1 the first rank of the stage (every rank of a stage has
// buffers of the same size: units are padded so that shards are equal). Throws std::invalid_argument when the
// engine refuses the configuration.
DryRunMemory dry_run(const DryRunSetup& setup);

}  // namespace gpt
