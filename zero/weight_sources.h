// Where the layer loop's weights come from, by ZeRO stage: decided once, when the engine is built.
//   ReplicatedWeights   stage 0: every rank updates the whole model and rounds it to the compute dtype itself
//   RegatheredWeights   stages 1, 2: each rank updates its shard; after the step the rounded shards are
//                       all-gathered into full compute weights on every rank
//   GatheredWeights     stage 3: compute weights stay sharded; each unit is all-gathered right before it
//                       computes and released right after (WeightGatherer: prefetch, qwZ and hpZ as options)
// The loop computes in fp32 on the device: fp16/bf16 compute weights are widened exactly before it sees
// them, and weights that arrive in wire memory are brought to the device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/loop.h"
#include "zero/config.h"
#include "zero/context.h"
#include "zero/events.h"
#include "zero/partition.h"

namespace gpt {

class WeightGatherer;

class EngineWeights : public WeightSource<float> {
 public:
  EngineWeights(const std::vector<std::string>& unit_names, EventLog& events)
      : names_(unit_names), events_(events) {}

  // The traffic phase of forward gathers: kParamGatherFwd while training, kEval for evaluation.
  void set_forward_phase(comm::Phase phase) { forward_phase_ = phase; }
  // This rank's fp32 master (flat shard layout) changed: recompute the compute weights from it.
  virtual void refresh(const float* master) = 0;
  // The most bytes of hpZ secondaries held at once (payload).
  virtual size_t secondary_peak_bytes() const { return 0; }

  void begin_pass(Pass pass, const std::vector<int>& schedule) override;
  // The unit's weights; the event log records that its compute begins.
  const float* acquire(int unit) final;

 protected:
  virtual void start_pass(const std::vector<int>& schedule, comm::Phase phase) = 0;
  virtual const float* fetch(int unit) = 0;

 private:
  const std::vector<std::string>& names_;
  EventLog& events_;
  comm::Phase forward_phase_ = comm::Phase::kParamGatherFwd;
  bool backward_ = false;
};

struct WeightSourceParts {
  const ZeroConfig& config;
  const Partition& partition;
  const std::vector<std::string>& unit_names;
  comm::Communicator& dp;
  comm::Communicator* hpz_group;  // stage 3 with hpZ
  const EngineContext& context;
};
// The weight source of config.stage.
std::unique_ptr<EngineWeights> make_weight_source(const WeightSourceParts& parts);

}  // namespace gpt
