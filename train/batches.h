// Micro-batches for the engine from the data loaders: a step's micro-batches of this rank (with their window
// indices, which key dropout), and the validation loss over a fixed set of validation batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/loader.h"
#include "zero/engine.h"

namespace gpt {

class TrainBatches {
 public:
  // Uses the windows [window_begin, window_end) of the data (fractions; see data::LoaderConfig).
  TrainBatches(const std::string& data_path, int vocab, int seq_len, int micro_batch, int accumulation_steps,
               const comm::Communicator& world, uint64_t seed, double window_begin = 0.0,
               double window_end = 1.0);
  // This rank's micro-batches of global batch `step` (0-based); valid until the next call.
  const std::vector<ZeroEngine::MicroBatch>& at(int64_t step);
  const data::TrainLoader& loader() const { return loader_; }

 private:
  data::TrainLoader loader_;
  int micro_batch_, seq_len_;
  std::vector<std::vector<int32_t>> inputs_, targets_;
  std::vector<std::vector<int64_t>> windows_;
  std::vector<ZeroEngine::MicroBatch> micro_batches_;
};

// Mean loss over the first `iters` x world-size validation batches of micro_batch sequences (rank r takes
// batches r, r + W, ...), with eval-phase gathers and no dropout. Every rank returns the same value.
double validation_loss(ZeroEngine& engine, const data::ValidLoader& valid, int micro_batch, int seq_len,
                       int iters, const comm::Communicator& world);

}  // namespace gpt
