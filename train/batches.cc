// TrainBatches and validation_loss; see batches.h.
#include "train/batches.h"

#include <algorithm>

#include "data/shard.h"

namespace gpt {
namespace {

data::LoaderConfig loader_config(int seq_len, int micro_batch, int accumulation_steps,
                                 const comm::Communicator& world, uint64_t seed, double begin, double end) {
  data::LoaderConfig c;
  c.seq_len = seq_len;
  c.micro_batch = micro_batch;
  c.accumulation_steps = accumulation_steps;
  c.world_size = world.size();
  c.rank = world.rank();
  c.seed = seed;
  c.window_begin = begin;
  c.window_end = end;
  return c;
}

}  // namespace

TrainBatches::TrainBatches(const std::string& data_path, int vocab, int seq_len, int micro_batch,
                           int accumulation_steps, const comm::Communicator& world, uint64_t seed,
                           double window_begin, double window_end)
    : loader_(data::expand_data_path(data_path), vocab,
              loader_config(seq_len, micro_batch, accumulation_steps, world, seed, window_begin, window_end)),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      inputs_(accumulation_steps, std::vector<int32_t>(size_t(micro_batch) * seq_len)),
      targets_(inputs_),
      windows_(accumulation_steps, std::vector<int64_t>(micro_batch)) {}

const std::vector<ZeroEngine::MicroBatch>& TrainBatches::at(int64_t step) {
  micro_batches_.clear();
  for (size_t m = 0; m < inputs_.size(); ++m) {
    loader_.load(step, int(m), inputs_[m].data(), targets_[m].data(), windows_[m].data());
    micro_batches_.push_back({inputs_[m].data(), targets_[m].data(), windows_[m].data()});
  }
  return micro_batches_;
}

double validation_loss(ZeroEngine& engine, const data::ValidLoader& valid, int micro_batch, int seq_len,
                       int iters, const comm::Communicator& world) {
  const int64_t n = std::min<int64_t>(iters, valid.num_batches(micro_batch) / world.size());
  if (n <= 0) {
    throw data::DataError("the validation data holds fewer than " + std::to_string(world.size()) +
                          " batches of " + std::to_string(micro_batch) +
                          " sequences; give a larger --valid-data-path or lower --micro-batch-size");
  }
  std::vector<int32_t> inputs(size_t(micro_batch) * seq_len), targets(inputs.size());
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    valid.load(i * world.size() + world.rank(), micro_batch, inputs.data(), targets.data());
    sum += engine.evaluate({inputs.data(), targets.data(), nullptr});  // the mean over ranks
  }
  return sum / double(n);
}

}  // namespace gpt
