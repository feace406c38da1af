// The NCCL-free part of building NCCL communicators, so that it builds and is tested in the CPU build:
// - group construction: which member makes a group's unique id (its first member), how the id reaches the
//   other members (a broadcast over a host-side GroupTransport: the MPI communicator in production, an
//   in-process fake in tests), and the rank each member gets in the new group (its position in the list);
// - the rule for when NCCL can be used at all (one GPU per rank).
// nccl_communicator.cc adds the NCCL calls: ncclGetUniqueId for make_id, ncclCommInitRank with the result.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"

namespace gpt::comm {

// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES); nccl_communicator.cc checks the size at compile time.
inline constexpr size_t kGroupIdBytes = 128;
using GroupId = std::array<uint8_t, kGroupIdBytes>;

// The host-side channel over which a group's id travels. Ranks are positions in the member list.
class GroupTransport {
 public:
  virtual ~GroupTransport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective over this transport's members, blocking: afterwards every member's `bytes` hold root's.
  virtual void broadcast(void* bytes, size_t size, int root) = 0;
  // Collective over the listed members only (world ranks in group-rank order, this rank among them): a
  // transport over them. Members call it in the same order; non-members do not call it at all.
  virtual std::unique_ptr<GroupTransport> subgroup(const std::vector<int>& world_ranks) = 0;
};

// A GroupTransport over a Communicator (the MPI backend): broadcast() is Communicator::broadcast in
// Phase::kOther, waited for (so the setup traffic is metered like any other); subgroup() is
// Communicator::subgroup, whose result the new transport owns.
class CommunicatorTransport final : public GroupTransport {
 public:
  explicit CommunicatorTransport(Communicator& borrowed) : comm_(&borrowed) {}
  explicit CommunicatorTransport(std::unique_ptr<Communicator> owned)
      : owned_(std::move(owned)), comm_(owned_.get()) {}

  Communicator& communicator() const { return *comm_; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void broadcast(void* bytes, size_t size, int root) override;
  std::unique_ptr<GroupTransport> subgroup(const std::vector<int>& world_ranks) override;

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* comm_;
};

// One member's place in a group about to be created.
struct GroupPlan {
  int rank = 0;     // in the new group: the position of this world rank in the member list
  int size = 0;     // members
  int creator = 0;  // the world rank that makes the id: the first member, group rank 0
  bool creates_id() const { return rank == 0; }
};

// The plan of world rank `world_rank` for the group `world_ranks` (group-rank order) of a parent with
// members `parent_world_ranks`; nullopt when world_rank is not listed (it takes no part). Throws
// std::invalid_argument (the MPI backend's messages) for a rank listed twice or one outside the parent.
std::optional<GroupPlan> plan_group(const std::vector<int>& parent_world_ranks, int world_rank,
                                    const std::vector<int>& world_ranks);

// The id of the group over `members`: group rank 0 calls make_id and broadcasts the result over members;
// every member returns it. Collective over members.
GroupId share_id(GroupTransport& members, const std::function<GroupId()>& make_id);

struct JoinedGroup {
  GroupPlan plan;
  std::vector<int> world_ranks;               // group-rank order
  GroupId id{};                               // the creator's, on every member
  std::unique_ptr<GroupTransport> transport;  // the members' own channel, for the group's subgroups
};

// Everything Communicator::subgroup does before NCCL: the plan, the members' transport (a subgroup of
// parent, whose ranks must match the plan's), and the id. nullopt at once, without communicating, for a
// world rank that is not a member.
std::optional<JoinedGroup> join_group(GroupTransport& parent, const std::vector<int>& parent_world_ranks,
                                      int world_rank, const std::vector<int>& world_ranks,
                                      const std::function<GroupId()>& make_id);

// NCCL needs one GPU per rank (it refuses two ranks of a communicator on one device). With `devices_on_node`
// GPUs visible per machine, the ranks of a machine (ranks_per_node; every rank for a simulated topology,
// which runs on one machine) must not outnumber them. When this is false, use the MPI communicator: the
// wire buffers are pinned host memory, so it works unchanged (host staging).
// Caveat: a launcher that gives each rank its own CUDA_VISIBLE_DEVICES makes every rank see 1 device;
// every_rank_has_own_gpu() over the ranks' device UUIDs is the exact test
// for that case (choose_nccl_device() in nccl_communicator.h gathers them).
bool nccl_usable(const Topology& topology, int devices_on_node);

// The device a rank drives under nccl_usable(): its index on its machine (local rank; world rank for a
// simulated topology), modulo the devices visible (so ranks sharing GPUs still get a valid index).
int device_of_rank(const Topology& topology, int devices_on_node);

// A CUDA device's UUID (cudaDeviceProp::uuid).
using DeviceUuid = std::array<uint8_t, 16>;
// The exact form of the rule, from each rank's device UUID (nullopt for a rank without a GPU): every rank has
// a GPU and no two ranks drive the same one.
bool every_rank_has_own_gpu(const std::vector<std::optional<DeviceUuid>>& device_of_each_rank);

}  // namespace gpt::comm
