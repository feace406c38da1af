// DryCommunicator: collectives of a world on paper; see dry_communicator.h.
#include "comm/dry_communicator.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace gpt::comm {

DryCommunicator::DryCommunicator(const Topology& topology)
    : DryCommunicator(
          topology,
          [&] {
            std::vector<int> all(size_t(topology.world_size));
            std::iota(all.begin(), all.end(), 0);
            return all;
          }(),
          std::make_shared<TrafficMeter>()) {}

DryCommunicator::DryCommunicator(const Topology& topology, std::vector<int> world_ranks,
                                 std::shared_ptr<TrafficMeter> meter)
    : topology_(topology), members_(std::move(world_ranks)), meter_(std::move(meter)) {
  const auto self = std::find(members_.begin(), members_.end(), topology.world_rank);
  if (self == members_.end())
    throw std::invalid_argument("a dry communicator's rank must be one of its members");
  rank_ = int(self - members_.begin());
}

std::unique_ptr<Communicator> DryCommunicator::subgroup(const std::vector<int>& world_ranks) {
  if (std::find(world_ranks.begin(), world_ranks.end(), topology_.world_rank) == world_ranks.end())
    return nullptr;
  return std::make_unique<DryCommunicator>(topology_, world_ranks, meter_);
}

}  // namespace gpt::comm
