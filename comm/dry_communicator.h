// DryCommunicator: one rank of a world that exists only on paper. Every collective completes at once and
// moves nothing; subgroups are more of the same. The planner's dry run of the engine (zero/dry_run.h) builds
// the engine of one rank of a cluster it does not have (64 GPUs on 4 nodes, say) over it, with the backend
// that computes nothing (kernels/dry), so that the engine creates its hpZ and qgZ groups, sizes its buffers
// for that world and walks a step's schedule exactly as it would there.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace gpt::comm {

class DryCommunicator final : public Communicator {
 public:
  // The whole world of `topology`, as its rank topology.world_rank.
  explicit DryCommunicator(const Topology& topology);
  // The group of these world ranks (group-rank order) of the world of `topology`, as its member
  // topology.world_rank, which must be listed; the meter is shared with the group it was made from.
  DryCommunicator(const Topology& topology, std::vector<int> world_ranks,
                  std::shared_ptr<TrafficMeter> meter);

  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }
  int world_rank_of(int group_rank) const override { return members_.at(size_t(group_rank)); }
  const Topology& topology() const override { return topology_; }
  TrafficMeter& meter() const override { return *meter_; }
  bool orders_after_device_work() const override { return true; }
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& world_ranks) override;

  Request all_gather(const void*, void*, size_t, Phase) override { return {}; }
  Request reduce_scatter(const void*, DType, void*, size_t, float, Phase) override { return {}; }
  Request all_reduce(void*, DType, size_t, float, Phase) override { return {}; }
  Request all_to_all_v(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&,
                       Phase) override {
    return {};
  }
  Request broadcast(void*, size_t, int, Phase) override { return {}; }
  Request barrier() override { return {}; }

 private:
  Topology topology_;
  std::vector<int> members_;  // world ranks in group-rank order
  int rank_ = 0;
  std::shared_ptr<TrafficMeter> meter_;
};

}  // namespace gpt::comm
