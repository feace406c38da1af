// This rank's optimizer state: the fp32 master weights and Adam's first and second moments over its shard
// (flat shard layout; the whole padded vector at stage 0), behind one interface wherever they live:
//   ResidentOptimizerState  three arena blocks in device memory; an update sees the whole shard as one group
//   SwappedOptimizerState   offload_optimizer "nvme": one record per sub-group in the optimizer swap file,
//                           walked through the swap buffers (swapped_optimizer.h); it refreshes the compute
//                           weights one sub-group at a time, which only stage 3's weight source can take
// The engine's optimizer step, its weight refresh after a load and checkpoint streaming call this interface;
// which one it is was decided once, when the engine was built.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "zero/config.h"
#include "zero/context.h"
#include "zero/offload_layout.h"
#include "zero/offload_store.h"
#include "zero/partition.h"
#include "zero/weight_sources.h"

namespace gpt {

class OptimizerState {
 public:
  // step(group, master, m, v, compute): the group's range of the flat shard and its arrays (group.size() fp32
  // each) where the ops compute on them; what step writes is kept. compute, when not empty, is the group's
  // compute weights (EngineWeights::rounding_target), which step writes as well: the new master rounded.
  using Visit =
      std::function<void(const SubGroup& group, float* master, float* m, float* v, const Tensor& compute)>;
  // visit(begin, n, master, m, v): flat shard elements [begin, begin+n) of each array in host memory.
  using HostChunk = std::function<void(int64_t begin, int64_t n, float* master, float* m, float* v)>;

  // A range of the flat shard to update before the rest, and what to do as soon as its compute weights are
  // new (the engine posts the next forward's first gather there, so it crosses while the rest updates).
  struct UpdateFirst {
    int64_t begin = 0, end = 0;
    std::function<void()> then;
  };

  virtual ~OptimizerState() = default;
  // Runs `step` on every group, and the compute weights follow the new master (rounded by step where the
  // weight source has a rounding target, else recomputed after it). With `first`
  // (stage 3, resident state), its range is stepped and refreshed first, then first->then() runs, then the
  // rest follows: AdamW is elementwise, so the order changes no value.
  virtual void update(const Visit& step, const UpdateFirst* first = nullptr) = 0;
  // The master changed (a checkpoint load, an import): recomputes the compute weights from it.
  virtual void refresh_weights() = 0;
  // Hands the state to the host in shard order, no more than a sub-group's worth at a time (the state may
  // live on NVMe): as stored (overwrite false), or zero-filled and stored after the visit (true).
  virtual void stream(bool overwrite, const HostChunk& visit) = 0;
};

struct OptimizerStateParts {
  const ZeroConfig& config;
  const Partition& partition;
  const EngineContext& context;
  EngineWeights<float>& weights;  // whose compute weights follow the master
  OffloadStore* offload;          // ZeRO-Infinity's swap files, when some state lives on NVMe
};
// The optimizer state of config.offload: resident, or swapped with offload_optimizer "nvme".
std::unique_ptr<OptimizerState> make_optimizer_state(const OptimizerStateParts& parts);

}  // namespace gpt
