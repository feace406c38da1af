// Test support for the ZeRO engine under MPI: a tiny GPT-2, a synthetic token shard (written by each rank to
// its own temporary file), and a runner that trains N steps and records each step's result and traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "zero/config.h"
#include "zero/engine.h"

namespace gpt::testing {

GPTConfig tiny_model();

struct RunSpec {
  ZeroConfig zero;
  int micro_batch = 2;
  int accumulation = 2;
  int steps = 20;
  uint64_t seed = 7;
  double lr = 1e-3;
  ZeroEngine::GradientHook hook;  // installed on the engine when set
  Ops* ops = nullptr;             // the engine's backend (null: the CPU's)
  // Tell the engine that another step follows every step but the last (ZeroEngine::NextCall), as gpt_train
  // does: stage 3 then posts the next forward's first gather from the optimizer.
  bool gather_ahead = false;
};

struct RunResult {
  std::vector<ZeroEngine::StepResult> steps;
  std::vector<comm::TrafficCounts> traffic;  // this rank's counts per step
  size_t activation_bytes = 0;
  size_t buffer_bytes = 0;              // the peak of the engine's "buffers" (gathers, buckets, staging)
  size_t hpz_secondary_peak_bytes = 0;  // the most hpZ secondary bytes held at once
  std::vector<float> master;            // full model after the run (model layout)
  std::vector<EngineEvent> events;      // of the last step
};

// Trains spec.steps steps on `group` (every rank of the group must call it). The data stream depends only on
// the global batch, so runs on different groups with equal global batches see the same data.
RunResult run(comm::Communicator& group, const GPTConfig& model, const RunSpec& spec);

// Trains spec.steps steps of an existing engine on the synthetic data (the data of `run`).
void train_steps(ZeroEngine& engine, comm::Communicator& group, const GPTConfig& model, const RunSpec& spec);

// Path of a synthetic shard for this process (written once).
std::string synthetic_shard(const GPTConfig& model);

}  // namespace gpt::testing
