// Engine test support; see engine_harness.h.
#include "tests/zero/engine_harness.h"

#include <unistd.h>

#include <cstdlib>

#include "data/shard.h"
#include "train/batches.h"

namespace gpt::testing {

GPTConfig tiny_model() {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden = 32;
  c.heads = 2;
  c.seq_len = 16;
  c.max_positions = 16;
  c.vocab = 200;  // padded to 256
  return c;
}

std::string synthetic_shard(const GPTConfig& model) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/synthetic_" + std::to_string(getpid()) + "_" +
                           std::to_string(model.vocab) + ".bin";
  if (access(path.c_str(), F_OK) == 0) return path;
  // Text-like statistics: a few frequent tokens and a pattern to learn.
  std::vector<uint16_t> tokens(40000);
  uint32_t state = 2024;
  for (size_t i = 0; i < tokens.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    const uint32_t r = state >> 8;
    tokens[i] = uint16_t(r % 4 == 0 ? (i * 7) % 13 : r % model.vocab);
  }
  data::write_shard(path, tokens);
  return path;
}

namespace {

ZeroEngine::NextCall next_call(const RunSpec& spec, int step) {
  return spec.gather_ahead && step + 1 < spec.steps ? ZeroEngine::NextCall::kTrainStep
                                                    : ZeroEngine::NextCall::kUnknown;
}

TrainBatches synthetic_batches(comm::Communicator& group, const GPTConfig& model, const RunSpec& spec) {
  return TrainBatches(synthetic_shard(model), model.vocab, model.seq_len, spec.micro_batch, spec.accumulation,
                      group, spec.seed);
}

}  // namespace

void train_steps(ZeroEngine& engine, comm::Communicator& group, const GPTConfig& model, const RunSpec& spec) {
  TrainBatches batches = synthetic_batches(group, model, spec);
  for (int s = 0; s < spec.steps; ++s) engine.train_step(batches.at(s), spec.lr, false, next_call(spec, s));
}

RunResult run(comm::Communicator& group, const GPTConfig& model, const RunSpec& spec) {
  TrainBatches batches = synthetic_batches(group, model, spec);
  ZeroEngine engine(model, spec.zero, spec.micro_batch, group, spec.seed, spec.ops);
  if (spec.hook) engine.set_gradient_hook(spec.hook);
  RunResult result;
  for (int s = 0; s < spec.steps; ++s) {
    engine.events().clear();
    const comm::TrafficCounts before = group.meter().snapshot();
    result.steps.push_back(engine.train_step(batches.at(s), spec.lr, false, next_call(spec, s)));
    result.traffic.push_back(group.meter().snapshot() - before);
  }
  result.events = engine.events().events();
  for (const auto& line : engine.memory()) {
    if (line.state == "activations") result.activation_bytes = line.bytes;
    if (line.state == "buffers") result.buffer_bytes = line.bytes;
  }
  result.hpz_secondary_peak_bytes = engine.hpz_secondary_peak_bytes();
  result.master = engine.gather_master();
  return result;
}

}  // namespace gpt::testing
