// Where the layer loop's gradients go, by ZeRO stage: decided once, when the engine is built.
//   AllReducedGradients        stage 0: full fp32 gradients accumulate in place over the micro-steps; one
//                              all-reduce at the accumulation boundary
//   ReduceScatteredGradients   stage 1: the same accumulation; one reduce-scatter at the boundary leaves
//                              this rank's shard
//   BucketedGradients          stages 2, 3: each unit's gradient of one micro-step goes straight into a
//                              bucketed reduce-scatter (GradientReducer; qgZ's int4 all-to-all as an option)
//                              and is added into this rank's fp32 shard, so no rank holds full gradients
// Every sink ends a step with this rank's reduced gradient shard (flat shard layout; the whole padded vector
// at stage 0), pre-divided by the world size: the mean over ranks, still carrying the loss scale. Training
// runs them with Real = float; the double-precision gradient checks with Real = double and an fp64 wire.
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

class LocoFeedback;

template <typename Real>
class EngineGradients : public GradientSink<Real> {
 public:
  // A test hook that sees (and may change) a unit's local gradient before it is reduced.
  using Hook = std::function<void(int unit, Real* grad, int64_t numel)>;

  explicit EngineGradients(const Partition& partition)
      : partition_(partition), open_(partition.units().size()) {}

  virtual void begin_step() = 0;    // zeroes the accumulators
  virtual void end_micro_step() {}  // waits for this micro-step's reductions
  virtual void end_step() {}        // the reduction at the accumulation boundary
  // This rank's reduced gradient shard (partition.shard_total() elements on the device) after end_step.
  virtual Real* shard() = 0;
  // Whether every gradient quantized on this rank since the last call was finite (qgZ never puts a gradient
  // on the wire unquantized, so the overflow check must look before quantization).
  virtual bool take_local_finite() { return true; }
  // LoCo's kept errors, which live with qgZ's bucket reduction (stages 2 and 3 with zeropp_loco_param on two
  // or more nodes), or null.
  virtual LocoFeedback* error_feedback() { return nullptr; }
  void set_hook(Hook hook) { hook_ = std::move(hook); }

  Real* open(int unit) final;
  void ready(int unit) final;

 protected:
  virtual Real* buffer_for(int unit) = 0;                // where unit's gradient accumulates
  virtual void hand_over(int unit, Real* gradient) = 0;  // final for this micro-step

  const Partition& partition_;

 private:
  std::vector<Real*> open_;
  Hook hook_;
};
using GradientHook = EngineGradients<float>::Hook;

struct GradientSinkParts {
  const ZeroConfig& config;
  const Partition& partition;
  const std::vector<std::string>& unit_names;
  // The order in which the loop's gradients become final, in segments that one micro-step hands over whole
  // (GradientReducer): one, or an interleaved pipeline stage's chunks.
  const std::vector<std::vector<int>>& gradient_order;
  comm::Communicator& dp;
  comm::Communicator* qgz_node;   // qgZ on two or more nodes: this rank's node group, else null
  comm::Communicator* qgz_cross;  // and the group of ranks with its local index
  const EngineContext& context;
};
// The gradient sink of config.stage (float, or double with config.precision kF64).
template <typename Real>
std::unique_ptr<EngineGradients<Real>> make_gradient_sink(const GradientSinkParts& parts);

}  // namespace gpt
