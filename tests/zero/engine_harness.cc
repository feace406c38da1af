// Engine test support; see engine_harness.h.
#include "tests/zero/engine_harness.h"

#include <unistd.h>

#include <cstdlib>

#include "data/loader.h"
#include "data/shard.h"

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

void train_steps(ZeroEngine& engine, comm::Communicator& group, const GPTConfig& model, const RunSpec& spec) {
  data::LoaderConfig lc;
  lc.seq_len = model.seq_len;
  lc.micro_batch = spec.micro_batch;
  lc.accumulation_steps = spec.accumulation;
  lc.world_size = group.size();
  lc.rank = group.rank();
  lc.seed = spec.seed;
  data::TrainLoader loader({synthetic_shard(model)}, model.vocab, lc);
  const size_t BT = size_t(spec.micro_batch) * model.seq_len;
  std::vector<std::vector<int32_t>> inputs(spec.accumulation, std::vector<int32_t>(BT)), targets = inputs;
  std::vector<std::vector<int64_t>> windows(spec.accumulation, std::vector<int64_t>(spec.micro_batch));
  for (int s = 0; s < spec.steps; ++s) {
    std::vector<ZeroEngine::MicroBatch> mbs;
    for (int m = 0; m < spec.accumulation; ++m) {
      loader.load(s, m, inputs[m].data(), targets[m].data(), windows[m].data());
      mbs.push_back({inputs[m].data(), targets[m].data(), windows[m].data()});
    }
    engine.train_step(mbs, spec.lr);
  }
}

RunResult run(comm::Communicator& group, const GPTConfig& model, const RunSpec& spec) {
  data::LoaderConfig lc;
  lc.seq_len = model.seq_len;
  lc.micro_batch = spec.micro_batch;
  lc.accumulation_steps = spec.accumulation;
  lc.world_size = group.size();
  lc.rank = group.rank();
  lc.seed = spec.seed;
  data::TrainLoader loader({synthetic_shard(model)}, model.vocab, lc);
  ZeroEngine engine(model, spec.zero, spec.micro_batch, group, spec.seed);
  if (spec.hook) engine.set_gradient_hook(spec.hook);

  const size_t BT = size_t(spec.micro_batch) * model.seq_len;
  std::vector<std::vector<int32_t>> inputs(spec.accumulation, std::vector<int32_t>(BT)), targets = inputs;
  std::vector<std::vector<int64_t>> windows(spec.accumulation, std::vector<int64_t>(spec.micro_batch));
  RunResult result;
  for (int s = 0; s < spec.steps; ++s) {
    std::vector<ZeroEngine::MicroBatch> mbs;
    for (int m = 0; m < spec.accumulation; ++m) {
      loader.load(s, m, inputs[m].data(), targets[m].data(), windows[m].data());
      mbs.push_back({inputs[m].data(), targets[m].data(), windows[m].data()});
    }
    engine.events().clear();
    const comm::TrafficCounts before = group.meter().snapshot();
    result.steps.push_back(engine.train_step(mbs, spec.lr));
    result.traffic.push_back(group.meter().snapshot() - before);
  }
  result.events = engine.events().events();
  for (const auto& line : engine.memory()) {
    if (line.state == "activations") result.activation_bytes = line.bytes;
  }
  result.hpz_secondary_peak_bytes = engine.hpz_secondary_peak_bytes();
  result.master = engine.gather_master();
  return result;
}

}  // namespace gpt::testing
