// Group construction for NCCL communicators without NCCL: plans, the id broadcast, the one-GPU-per-rank rule.
#include "comm/nccl_groups.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpt::comm {

void CommunicatorTransport::broadcast(void* bytes, size_t size, int root) {
  comm_->broadcast(bytes, size, root, Phase::kOther).wait();
}

std::unique_ptr<GroupTransport> CommunicatorTransport::subgroup(const std::vector<int>& world_ranks) {
  std::unique_ptr<Communicator> child = comm_->subgroup(world_ranks);
  if (!child) throw std::logic_error("comm: a member of a subgroup got no communicator for it");
  return std::make_unique<CommunicatorTransport>(std::move(child));
}

std::optional<GroupPlan> plan_group(const std::vector<int>& parent_world_ranks, int world_rank,
                                    const std::vector<int>& world_ranks) {
  const auto me = std::find(world_ranks.begin(), world_ranks.end(), world_rank);
  if (me == world_ranks.end()) return std::nullopt;
  std::vector<int> sorted = world_ranks;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw std::invalid_argument("comm: subgroup lists a rank twice");
  }
  for (int member : world_ranks) {
    if (std::find(parent_world_ranks.begin(), parent_world_ranks.end(), member) == parent_world_ranks.end()) {
      throw std::invalid_argument("comm: subgroup member " + std::to_string(member) +
                                  " is not in the parent communicator");
    }
  }
  GroupPlan plan;
  plan.rank = static_cast<int>(me - world_ranks.begin());
  plan.size = static_cast<int>(world_ranks.size());
  plan.creator = world_ranks.front();
  return plan;
}

GroupId share_id(GroupTransport& members, const std::function<GroupId()>& make_id) {
  GroupId id{};
  if (members.rank() == 0) id = make_id();
  members.broadcast(id.data(), id.size(), 0);
  return id;
}

std::optional<JoinedGroup> join_group(GroupTransport& parent, const std::vector<int>& parent_world_ranks,
                                      int world_rank, const std::vector<int>& world_ranks,
                                      const std::function<GroupId()>& make_id) {
  std::optional<GroupPlan> plan = plan_group(parent_world_ranks, world_rank, world_ranks);
  if (!plan) return std::nullopt;
  JoinedGroup joined;
  joined.plan = *plan;
  joined.world_ranks = world_ranks;
  joined.transport = parent.subgroup(world_ranks);
  if (joined.transport->rank() != plan->rank || joined.transport->size() != plan->size) {
    throw std::logic_error("comm: the transport's subgroup has rank " +
                           std::to_string(joined.transport->rank()) + " of " +
                           std::to_string(joined.transport->size()) + ", the plan " +
                           std::to_string(plan->rank) + " of " + std::to_string(plan->size));
  }
  joined.id = share_id(*joined.transport, make_id);
  return joined;
}

namespace {

// Ranks on this rank's machine. A simulated topology puts every rank on one machine (that is what
// --ranks-per-node is for).
int ranks_on_machine(const Topology& topology) {
  return topology.simulated ? topology.world_size : topology.ranks_per_node;
}

}  // namespace

bool nccl_usable(const Topology& topology, int devices_on_node) {
  return devices_on_node >= 1 && ranks_on_machine(topology) <= devices_on_node;
}

int device_of_rank(const Topology& topology, int devices_on_node) {
  if (devices_on_node < 1) throw std::invalid_argument("comm: device_of_rank needs at least one device");
  return topology.machine_rank() % devices_on_node;
}

bool every_rank_has_own_gpu(const std::vector<std::optional<DeviceUuid>>& device_of_each_rank) {
  std::vector<DeviceUuid> sorted;
  for (const std::optional<DeviceUuid>& device : device_of_each_rank) {
    if (!device) return false;
    sorted.push_back(*device);
  }
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

}  // namespace gpt::comm
