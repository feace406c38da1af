// Where the layer loop's weights come from, by ZeRO stage: decided once, when the engine is built.
//   ReplicatedWeights   stage 0: every rank updates the whole model and rounds it to the compute dtype itself
//   RegatheredWeights   stages 1, 2: each rank updates its shard; after the step the rounded shards are
//                       all-gathered into full compute weights on every rank
//   GatheredWeights     stage 3: compute weights stay sharded; each unit is all-gathered right before it
//                       computes and released right after (WeightGatherer: prefetch, qwZ and hpZ as options);
//                       its shard lives in wire memory or, with offload_param "nvme", on NVMe (ShardHome)
// The loop computes in fp32 on the device (Real = float): fp16/bf16 compute weights are widened exactly
// before it sees them, and weights that arrive in wire memory are brought to the device. The double-precision
// gradient checks drive the same sources with Real = double, an fp64 master and fp64 compute weights.
#pragma once

#include <cstdint>
#include <functional>
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
class OffloadStore;
struct SubGroup;

// Compute weights recomputed one sub-group of the master at a time, for a master that is itself swapped in by
// sub-groups (offload_optimizer "nvme", which needs stage 3: only stage 3's source is one).
// Also the resident optimizer state's, when the next forward's first gather leaves from inside its update.
template <typename Real>
class SubGroupRefresh {
 public:
  // Before the first group: the weights are changing, so whatever was derived from the old ones (stage 3's
  // hpZ secondaries, quantized shards, kept units) is dropped.
  virtual void refresh_begin() = 0;
  // master holds the group's values; refresh_done() follows the last group.
  virtual void refresh_group(const Real* master, const SubGroup& group) = 0;
  virtual void refresh_done() = 0;

 protected:
  ~SubGroupRefresh() = default;
};

template <typename Real>
class EngineWeights : public WeightSource<Real> {
 public:
  EngineWeights(const std::vector<std::string>& unit_names, EventLog& events)
      : names_(unit_names), events_(events) {}

  // The traffic phase of forward gathers: kParamGatherFwd while training, kEval for evaluation.
  void set_forward_phase(comm::Phase phase) { forward_phase_ = phase; }
  // This rank's master (flat shard layout, in Real) changed: recompute the compute weights from it.
  virtual void refresh(const Real* master) = 0;
  // The compute weights that refresh rounds the master's flat elements [group.begin, group.end) into, where
  // they lie in the master's own layout (stage 0's whole vector, stage 3's resident shard), so an optimizer
  // can write them in its update's own pass (Ops::adamw_with_copy); empty where the rounding goes elsewhere
  // (stages 1 and 2: a shard to all-gather; offload_param "nvme": the swap's staging).
  virtual Tensor rounding_target(const SubGroup& group) const { return {}; }
  // refresh() with its rounding done by `round`, which writes every rounding_target (what else refresh
  // does, before or after, stays here).
  virtual void refresh_rounded(const std::function<void()>& round);
  // This source as one that also takes the master a sub-group at a time (stage 3's), or null.
  virtual SubGroupRefresh<Real>* by_sub_group() { return nullptr; }
  // The most bytes of hpZ secondaries held at once (payload).
  virtual size_t secondary_peak_bytes() const { return 0; }
  // Begins the next training forward now, its first unit's gather posted (stage 3, from the optimizer once
  // that unit's weights are refreshed); the loop's begin_pass for it takes it up (WeightGatherer).
  virtual void begin_forward_ahead(const std::vector<int>& schedule);
  // Waits for the bytes of that gather (WeightGatherer::finish_ahead); nothing when none was begun.
  virtual void finish_forward_ahead() {}

  void begin_pass(Pass pass, const std::vector<int>& schedule) override;
  // The unit's weights; the event log records that its compute begins.
  WeightView acquire(int unit) final;

 protected:
  virtual void start_pass(const std::vector<int>& schedule, comm::Phase phase) = 0;
  virtual WeightView fetch(int unit) = 0;

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
  OffloadStore* offload = nullptr;  // ZeRO-Infinity's swap files, when offload_param is "nvme"
  // zero_hierarchical_allgather on two or more nodes: this rank's node group and the group of the ranks
  // with its local index on every node (stage 3), else null.
  comm::Communicator* node_group = nullptr;
  comm::Communicator* cross_group = nullptr;
  // The layer loop computes in config.precision's fp16/bf16 (the half loop, LayerLoop's compute dtype): the
  // source hands out the compute weights themselves, not a copy widened to Real.
  bool half_loop = false;
};
// The weight source of config.stage (float, or double with config.precision kF64).
template <typename Real>
std::unique_ptr<EngineWeights<Real>> make_weight_source(const WeightSourceParts& parts);

}  // namespace gpt
