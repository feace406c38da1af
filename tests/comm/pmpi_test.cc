// The PMPI interposer against the traffic meter: for every collective (an uneven all-to-allv first), the
// bytes that really reached MPI_Isend, by destination, equal what the meter recorded, to the byte, by link
// class; the all-to-allv's bytes per destination equal the sizes asked for; and the backend never calls
// MPI's own collectives while it runs ours.
#include <doctest/doctest.h>

#include <functional>
#include <numeric>

#include "tests/comm/mpi_test_env.h"
#include "tests/comm/pmpi_counter.h"

namespace gpt::comm::testing {
namespace {

struct Witnessed {
  TrafficCounts metered;  // this rank's meter, over the operation
  pmpi::Counts seen;      // this rank's MPI send calls, over the operation
};

// Runs one operation (issued and waited by `run`) between two synchronizations that themselves send nothing
// the two witnesses would disagree on: the meter and the interposer are read on both sides of it.
Witnessed witness(const std::function<void()>& run) {
  world().barrier().wait();
  const TrafficCounts before = world().meter().snapshot();
  pmpi::reset();
  run();
  Witnessed w{world().meter().snapshot() - before, pmpi::counts()};
  world().barrier().wait();
  return w;
}

// The interposer's bytes by destination, classed with the topology, must equal the meter's by link.
void check_agree(const Witnessed& w, const char* what) {
  const Topology& t = world().topology();
  uint64_t intra = 0, inter = 0;
  for (int dest = 0; dest < t.world_size; ++dest) {
    (t.node_of(dest) == t.node() ? intra : inter) += w.seen.bytes_to[dest];
  }
  INFO(what, ", world rank ", t.world_rank, ", ", t.describe(), "; meter: ", w.metered.describe());
  CHECK(intra == w.metered.total(Link::kIntraNode));
  CHECK(inter == w.metered.total(Link::kInterNode));
  CHECK(w.seen.bytes_to[t.world_rank] == 0);  // nothing is ever sent to oneself
  CHECK(w.seen.collective_calls == 0);
  if (t.world_size > 1 && w.metered.total() > 0) CHECK(w.seen.send_calls > 0);  // the interposer is live
}

TEST_CASE("PMPI: an uneven all_to_all_v reaches MPI_Isend exactly as sized and as metered") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  // Uneven, with empty blocks, and one block larger than a small --max-message-bytes.
  auto block = [](int from, int to) -> size_t {
    return (from * 7 + to * 3) % 5 == 0 ? 0 : 777 * (to + 1) + 13 * from;
  };
  std::vector<size_t> send_bytes(w), recv_bytes(w);
  for (int p = 0; p < w; ++p) {
    send_bytes[p] = block(r, p);
    recv_bytes[p] = block(p, r);
  }
  std::vector<uint8_t> send(std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0)), 5);
  std::vector<uint8_t> recv(std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0)));
  const Witnessed seen = witness([&] {
    comm.all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes, Phase::kGradReduce).wait();
  });
  check_agree(seen, "all_to_all_v");
  for (int p = 0; p < w; ++p) {
    INFO("world rank ", r, " -> ", p);
    CHECK(seen.seen.bytes_to[p] == (p == r ? 0 : send_bytes[p]));
  }
  CHECK(seen.metered.at(Phase::kGradReduce) == seen.metered.total());
}

TEST_CASE("PMPI: every other collective, on the world and on subgroups, agrees with the meter") {
  Communicator& comm = world();
  const Topology& t = comm.topology();
  const int w = comm.size();
  std::vector<int> node_ranks(t.ranks_per_node), cross_ranks;
  std::iota(node_ranks.begin(), node_ranks.end(), t.node() * t.ranks_per_node);
  for (int n = 0; n < t.num_nodes(); ++n) cross_ranks.push_back(n * t.ranks_per_node + t.local_rank());
  auto node = comm.subgroup(node_ranks);
  auto cross = comm.subgroup(cross_ranks);

  std::vector<uint8_t> bytes(2500000, 1), gathered(40000 * w);
  std::vector<uint16_t> halves(30011 * w, 0x3c00);
  std::vector<float> shard(30011);
  check_agree(
      witness([&] { comm.all_gather(bytes.data(), gathered.data(), 40000, Phase::kParamGatherFwd).wait(); }),
      "all_gather");
  check_agree(
      witness([&] {
        comm.reduce_scatter(halves.data(), DType::kF16, shard.data(), 30011, 1.0f, Phase::kGradReduce).wait();
      }),
      "reduce_scatter");
  check_agree(
      witness([&] { comm.all_reduce(halves.data(), DType::kBF16, 12345, 1.0f, Phase::kEval).wait(); }),
      "all_reduce");
  check_agree(witness([&] { comm.broadcast(bytes.data(), 2500000, w - 1, Phase::kOther).wait(); }),
              "broadcast");
  check_agree(witness([&] { comm.barrier().wait(); }), "barrier");
  check_agree(witness([&] {
                Request a = node->all_gather(bytes.data(), gathered.data(), 1000, Phase::kParamGatherBwd);
                Request b = cross->all_reduce(halves.data(), DType::kF16, 999, 0.5f, Phase::kGradReduce);
                a.wait();
                b.wait();
              }),
              "node all_gather with cross-node all_reduce");
}

}  // namespace
}  // namespace gpt::comm::testing
