// Group construction for NCCL communicators, on the CPU: one thread per rank over an in-process fake
// transport builds the groups the ZeRO++ engine builds (world, hpZ, node, cross-node; zero/engine.cc) and a
// nested one, for the topologies 2x2, 2x4, 4x1 and 1x8; every member must end with its creator's id (made
// once, by the first member) and its position as its rank. Also the plan's argument checks and the
// one-GPU-per-rank rule.
#include <doctest/doctest.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_groups.h"

namespace gpt::comm {
namespace {

// The shared mailbox of the fake transports: the k-th group over a given member list is the same group on
// every member (members create groups in the same order), so (members, k, broadcast number) names a message.
struct Hub {
  using Key = std::tuple<std::vector<int>, int, int>;
  std::mutex mutex;
  std::condition_variable posted;
  std::map<Key, std::vector<uint8_t>> messages;
};

// What one rank keeps across its transports: how many groups over each member list it has joined.
struct RankState {
  int world_rank = 0;
  std::map<std::vector<int>, int> groups_joined;
  int broadcasts = 0;
};

class FakeTransport final : public GroupTransport {
 public:
  FakeTransport(Hub& hub, RankState& state, std::vector<int> members)
      : hub_(hub), state_(state), members_(std::move(members)), instance_(state_.groups_joined[members_]++) {
    rank_ =
        static_cast<int>(std::find(members_.begin(), members_.end(), state_.world_rank) - members_.begin());
    REQUIRE(rank_ < static_cast<int>(members_.size()));
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }

  void broadcast(void* bytes, size_t size, int root) override {
    ++state_.broadcasts;
    const Hub::Key key{members_, instance_, sequence_++};
    std::unique_lock lock(hub_.mutex);
    if (rank_ == root) {
      const auto* data = static_cast<const uint8_t*>(bytes);
      hub_.messages[key].assign(data, data + size);
      hub_.posted.notify_all();
      return;
    }
    hub_.posted.wait(lock, [&] { return hub_.messages.count(key) != 0; });
    const std::vector<uint8_t>& message = hub_.messages[key];
    REQUIRE(message.size() == size);
    std::memcpy(bytes, message.data(), size);
  }

  std::unique_ptr<GroupTransport> subgroup(const std::vector<int>& world_ranks) override {
    for (int member : world_ranks) {
      REQUIRE(std::find(members_.begin(), members_.end(), member) != members_.end());
    }
    return std::make_unique<FakeTransport>(hub_, state_, world_ranks);
  }

 private:
  Hub& hub_;
  RankState& state_;
  std::vector<int> members_;
  int instance_;
  int rank_ = 0;
  int sequence_ = 0;
};

// A recognizable id: the creating world rank and how many ids it made before, then a fixed pattern.
GroupId make_test_id(int world_rank, int serial) {
  GroupId id{};
  id[0] = uint8_t(world_rank);
  id[1] = uint8_t(serial);
  for (size_t i = 2; i < id.size(); ++i) id[i] = uint8_t(i * 7 + world_rank);
  return id;
}

// One rank's outcome for one named group.
struct Joined {
  std::vector<int> members;
  GroupPlan plan;
  GroupId id{};
};

// The groups of one rank, created as the NCCL communicator would: the world (share_id over the world
// transport), then the ZeRO++ shapes as subgroups of the world, then a nested group inside the node group.
struct RankRun {
  RankState state;
  std::map<std::string, Joined> groups;
  std::vector<GroupId> made;  // the ids this rank created
  int non_member_calls = 0;   // groups that returned nullopt
};

void run_rank(Hub& hub, const Topology& t, RankRun& run) {
  run.state.world_rank = t.world_rank;
  auto make_id = [&] {
    run.made.push_back(make_test_id(t.world_rank, static_cast<int>(run.made.size())));
    return run.made.back();
  };
  std::vector<int> world;
  for (int r = 0; r < t.world_size; ++r) world.push_back(r);
  FakeTransport world_transport(hub, run.state, world);
  run.groups["world"] =
      Joined{world, *plan_group(world, t.world_rank, world), share_id(world_transport, make_id)};

  const int rank = t.world_rank, L = t.ranks_per_node, N = t.num_nodes();
  std::vector<std::pair<std::string, std::vector<int>>> shapes;
  const int h = L >= 2 ? L / 2 : 1;  // hpZ partitions of half a node
  std::vector<int> hpz, node, cross;
  for (int i = rank / h * h; i < rank / h * h + h; ++i) hpz.push_back(i);
  for (int i = t.node() * L; i < t.node() * L + L; ++i) node.push_back(i);
  for (int n = 0; n < N; ++n) cross.push_back(n * L + t.local_rank());
  shapes = {{"hpz", hpz}, {"node", node}, {"cross", cross}};
  std::unique_ptr<GroupTransport> node_transport;
  for (auto& [name, members] : shapes) {
    std::optional<JoinedGroup> joined = join_group(world_transport, world, rank, members, make_id);
    REQUIRE(joined);
    run.groups[name] = Joined{joined->world_ranks, joined->plan, joined->id};
    if (name == "node") node_transport = std::move(joined->transport);
  }
  // A nested group: the node's ranks in reverse order, built from the node group's own transport; ranks of
  // other nodes are not members of it and must return at once.
  std::vector<int> reversed(node.rbegin(), node.rend());
  std::optional<JoinedGroup> nested = join_group(*node_transport, node, rank, reversed, make_id);
  REQUIRE(nested);
  run.groups["node_reversed"] = Joined{nested->world_ranks, nested->plan, nested->id};
  // The first node's ranks as a subgroup of the world: the other nodes' ranks take no part.
  std::vector<int> first_node(world.begin(), world.begin() + L);
  std::optional<JoinedGroup> first = join_group(world_transport, world, rank, first_node, make_id);
  if (first) {
    run.groups["first_node"] = Joined{first->world_ranks, first->plan, first->id};
  } else {
    ++run.non_member_calls;
  }
}

void check_topology(int world_size, int ranks_per_node) {
  const int nodes = world_size / ranks_per_node;
  INFO(nodes, "x", ranks_per_node);
  Hub hub;
  std::vector<RankRun> runs(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    const Topology t = make_topology(world_size, r, ranks_per_node, true);
    threads.emplace_back([&hub, t, &run = runs[r]] { run_rank(hub, t, run); });
  }
  for (auto& thread : threads) thread.join();

  std::map<std::pair<std::string, std::vector<int>>, GroupId> id_of_group;  // distinct groups
  int groups_made = 0;
  for (int r = 0; r < world_size; ++r) {
    for (const auto& group : runs[r].groups) {
      const std::string& name = group.first;
      const auto& joined = group.second;
      INFO("world rank ", r, ", group ", name);
      const std::vector<int>& m = joined.members;
      CHECK(m[joined.plan.rank] == r);  // the rank is the position in the list
      CHECK(joined.plan.size == static_cast<int>(m.size()));
      CHECK(joined.plan.creator == m.front());
      // The id is the creator's: its world rank is in byte 0, and every member holds the same bytes.
      CHECK(joined.id[0] == m.front());
      auto [at, inserted] = id_of_group.emplace(std::pair{name, m}, joined.id);
      if (!inserted) CHECK(at->second == joined.id);
      if (joined.plan.creates_id()) ++groups_made;
    }
    CHECK(runs[r].non_member_calls == (r < ranks_per_node ? 0 : 1));
  }
  // Each group's id was made exactly once, by its creator, and no two groups share an id.
  int made = 0;
  for (const RankRun& run : runs) made += static_cast<int>(run.made.size());
  CHECK(made == groups_made);
  CHECK(made == static_cast<int>(id_of_group.size()));
  std::vector<GroupId> ids;
  for (const auto& [key, id] : id_of_group) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  // The shapes: every rank's node group holds its node's ranks, the cross-node group one rank per node.
  const Topology any = make_topology(world_size, world_size - 1, ranks_per_node, true);
  const RankRun& last = runs.back();
  CHECK(last.groups.at("node").members.size() == size_t(ranks_per_node));
  CHECK(last.groups.at("cross").members.size() == size_t(any.num_nodes()));
  CHECK(last.groups.at("node_reversed").plan.rank == 0);  // the last rank of its node leads the reversal
}

TEST_CASE("group construction: world, hpZ, node, cross-node and nested groups over a fake transport") {
  check_topology(4, 2);  // 2 nodes x 2
  check_topology(8, 4);  // 2 nodes x 4
  check_topology(4, 1);  // 4 nodes x 1
  check_topology(8, 8);  // 1 node x 8
}

TEST_CASE("plan_group: non-members take no part; duplicates and outsiders are argument errors") {
  const std::vector<int> parent = {0, 1, 2, 3};
  CHECK_FALSE(plan_group(parent, 2, {0, 1}));
  CHECK_FALSE(plan_group(parent, 2, {}));
  const std::optional<GroupPlan> plan = plan_group(parent, 2, {3, 2, 0});
  REQUIRE(plan);
  CHECK(plan->rank == 1);
  CHECK(plan->size == 3);
  CHECK(plan->creator == 3);
  CHECK_FALSE(plan->creates_id());
  CHECK_THROWS_AS(plan_group(parent, 2, {2, 1, 2}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_group({0, 2}, 2, {2, 1}),
                       "comm: subgroup member 1 is not in the parent communicator", std::invalid_argument);
}

TEST_CASE("share_id: a group of one makes its own id and sends nothing") {
  Hub hub;
  RankState state;
  state.world_rank = 5;
  FakeTransport alone(hub, state, {5});
  int calls = 0;
  const GroupId id = share_id(alone, [&] {
    ++calls;
    return make_test_id(5, 0);
  });
  CHECK(calls == 1);
  CHECK(id == make_test_id(5, 0));
}

TEST_CASE("nccl_usable: one GPU per rank on every machine") {
  CHECK(nccl_usable(make_topology(8, 3, 4, false), 4));        // 2 nodes x 4 ranks, 4 GPUs each
  CHECK(nccl_usable(make_topology(8, 3, 4, false), 8));        // spare GPUs are fine
  CHECK_FALSE(nccl_usable(make_topology(8, 3, 4, false), 2));  // two ranks per GPU
  CHECK_FALSE(nccl_usable(make_topology(4, 0, 4, false), 0));  // no GPU at all
  CHECK(nccl_usable(make_topology(1, 0, 1, false), 1));
  // A simulated topology runs every rank on this machine, whatever its --ranks-per-node says.
  CHECK_FALSE(nccl_usable(make_topology(4, 0, 2, true), 2));
  CHECK(nccl_usable(make_topology(4, 0, 2, true), 4));
  // Devices: the index on the machine, wrapped when ranks share GPUs.
  CHECK(device_of_rank(make_topology(8, 6, 4, false), 4) == 2);
  CHECK(device_of_rank(make_topology(4, 3, 2, true), 8) == 3);
  CHECK(device_of_rank(make_topology(4, 3, 4, false), 2) == 1);
  CHECK_THROWS_AS(device_of_rank(make_topology(4, 3, 4, false), 0), std::invalid_argument);
}

TEST_CASE("every_rank_has_own_gpu: ranks that see one device each may still share a GPU") {
  DeviceUuid a{}, b{};
  a[0] = 1;
  b[0] = 2;
  CHECK(every_rank_has_own_gpu({a, b}));
  CHECK(every_rank_has_own_gpu({a}));
  CHECK(every_rank_has_own_gpu({}));
  CHECK_FALSE(every_rank_has_own_gpu({a, b, a}));
  CHECK_FALSE(every_rank_has_own_gpu({a, std::nullopt}));  // a rank without a GPU
}

}  // namespace
}  // namespace gpt::comm
