// The NCCL communicator's byte accounting (comm/nccl_traffic.h) against the closed forms the MPI backend's
// meter is tested against (tests/comm/meter_test.cc): a ring all-gather or reduce-scatter of E elements of b
// bytes sends (W-1)*E*b bytes in all, N*(W-1)/W*E*b of them across nodes (N >= 2); an all-reduce is two
// such passes; the broadcast chain crosses every node boundary but the one it starts on; all-to-all blocks
// count by their destination's node. Summed over the ranks of simulated topologies, on the CPU. Also: the
// all-reduce equals the MPI ring's sends rank by rank for uneven counts, subgroups' links, and why the ring
// order matters.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "comm/nccl_traffic.h"

namespace gpt::comm {
namespace {

struct Shape {
  int world_size;
  int ranks_per_node;
};
const Shape kShapes[] = {{1, 1}, {2, 1}, {2, 2}, {3, 3}, {4, 2}, {8, 4}, {4, 1}, {8, 8}, {6, 2}};

std::vector<int> iota_ranks(int n) {
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// The closed form of one ring pass over all W ranks carrying total_bytes (divisible by W), as in meter_test.
LinkBytes ring_closed_form(const Topology& t, uint64_t total_bytes) {
  const uint64_t w = t.world_size, n = t.num_nodes();
  const uint64_t all = (w - 1) * total_bytes;
  const uint64_t inter = n >= 2 ? n * (w - 1) * (total_bytes / w) : 0;
  return LinkBytes{all - inter, inter};
}

// The model's bytes summed over every rank of the world group with the given ring.
template <typename PerRank>
LinkBytes over_ranks(const RingTraffic& ring, PerRank per_rank) {
  LinkBytes sum;
  for (int r = 0; r < ring.size(); ++r) sum += per_rank(r);
  return sum;
}

TEST_CASE("ring accounting over the world equals the MPI backend's closed forms") {
  for (const Shape& shape : kShapes) {
    const Topology t = make_topology(shape.world_size, 0, shape.ranks_per_node, true);
    const uint64_t w = t.world_size;
    INFO(t.describe());
    const RingTraffic ring(t, iota_ranks(shape.world_size));
    CHECK(over_ranks(ring, [&](int r) { return ring.all_gather(r, 3000); }) == ring_closed_form(t, w * 3000));
    CHECK(over_ranks(ring, [&](int r) { return ring.all_gather(r, 1234); }) == ring_closed_form(t, w * 1234));
    CHECK(over_ranks(ring, [&](int r) { return ring.reduce_scatter(r, 1000, 2); }) ==
          ring_closed_form(t, w * 1000 * 2));
    const LinkBytes pass = ring_closed_form(t, w * 600 * 2);
    CHECK(over_ranks(ring, [&](int r) { return ring.all_reduce(r, w * 600, 2); }) ==
          LinkBytes{2 * pass.intra, 2 * pass.inter});
    // The broadcast chain from root 1: crossing = N - 1 when the root starts a node, else N (N >= 2).
    const int root = 1 % shape.world_size;
    const uint64_t n = t.num_nodes(), crossing = n >= 2 ? n - (root % t.ranks_per_node == 0 ? 1 : 0) : 0;
    CHECK(over_ranks(ring, [&](int r) { return ring.broadcast(r, 5000, root); }) ==
          LinkBytes{(w - 1 - crossing) * 5000, crossing * 5000});
  }
}

TEST_CASE("all-to-all blocks count by their destination's node, self blocks not at all") {
  for (const Shape& shape : kShapes) {
    const Topology t = make_topology(shape.world_size, 0, shape.ranks_per_node, true);
    const int w = t.world_size;
    INFO(t.describe());
    auto block = [](int from, int to) -> size_t { return size_t(37 * from + 101 * to) % 300; };
    const RingTraffic ring(t, iota_ranks(w));
    LinkBytes expected;
    for (int from = 0; from < w; ++from) {
      for (int to = 0; to < w; ++to) {
        if (from != to)
          expected.add(t.node_of(from) == t.node_of(to) ? Link::kIntraNode : Link::kInterNode,
                       block(from, to));
      }
    }
    const LinkBytes sum = over_ranks(ring, [&](int r) {
      std::vector<size_t> send(w);
      for (int p = 0; p < w; ++p) send[p] = block(r, p);
      return ring.all_to_all_v(r, send);
    });
    CHECK(sum == expected);
  }
}

// What the MPI backend's ring all-reduce (comm/mpi_collectives.cc) sends from rank r: ceil(E/W)-element
// chunks; reduce-scatter step s sends chunk r-s-1, all-gather step s sends chunk r-s.
uint64_t mpi_all_reduce_elements(int w, int r, uint64_t count) {
  const uint64_t chunk = (count + w - 1) / w;
  auto length = [&](int j) {
    return std::min<uint64_t>(count, (j + 1) * chunk) - std::min<uint64_t>(count, j * chunk);
  };
  auto wrap = [&](int j) { return ((j % w) + w) % w; };
  uint64_t sent = 0;
  for (int s = 0; s < w - 1; ++s) sent += length(wrap(r - s - 1)) + length(wrap(r - s));
  return sent;
}

TEST_CASE("all-reduce of any count: rank by rank what the MPI ring sends, 2(W-1) copies of the data in all") {
  for (const Shape& shape : kShapes) {
    const Topology t = make_topology(shape.world_size, 0, shape.ranks_per_node, true);
    const int w = t.world_size;
    const RingTraffic ring(t, iota_ranks(w));
    for (uint64_t count : {0, 1, 5, 7, 64, 1001}) {
      INFO(t.describe(), ", count ", count);
      for (int r = 0; r < w; ++r)
        CHECK(ring.all_reduce(r, count, 4).total() == 4 * mpi_all_reduce_elements(w, r, count));
      CHECK(over_ranks(ring, [&](int r) { return ring.all_reduce(r, count, 4); }).total() ==
            uint64_t(2) * (w - 1) * count * 4);
    }
  }
}

TEST_CASE("subgroups: the node group stays inside the node, the cross-node group only crosses") {
  const Topology t = make_topology(8, 5, 4, true);  // 2 x 4, this is world rank 5
  const RingTraffic node(t, {4, 5, 6, 7});
  const RingTraffic cross(t, {1, 5});
  const RingTraffic hpz(t, {4, 5});
  for (int r = 0; r < 4; ++r) CHECK(node.reduce_scatter(r, 100, 2) == LinkBytes{3 * 200, 0});
  for (int r = 0; r < 2; ++r) CHECK(cross.all_gather(r, 64) == LinkBytes{0, 64});
  for (int r = 0; r < 2; ++r) CHECK(hpz.all_reduce(r, 10, 4) == LinkBytes{40, 0});
  // A group of one sends nothing.
  const RingTraffic alone(t, {5});
  CHECK(alone.all_reduce(0, 100, 4) == LinkBytes{});
  CHECK(alone.broadcast(0, 100, 0) == LinkBytes{});
}

TEST_CASE("ring order: node-contiguous rings keep the totals; interleaved rings cross more") {
  const Topology t = make_topology(8, 0, 4, true);  // 2 x 4
  const uint64_t total = 8 * 1000;
  const LinkBytes closed = ring_closed_form(t, total);
  // Nodes visited in the other order, each node's ranks permuted: still two crossings per pass.
  const RingTraffic contiguous(t, iota_ranks(8), {6, 4, 7, 5, 2, 0, 3, 1});
  CHECK(over_ranks(contiguous, [&](int r) { return contiguous.all_gather(r, 1000); }) == closed);
  CHECK(contiguous.link_to_successor(5) == Link::kInterNode);  // position 3 -> position 4 (node 1 -> 0)
  CHECK(contiguous.link_to_successor(6) == Link::kIntraNode);
  // Alternating nodes: every link crosses.
  const RingTraffic interleaved(t, iota_ranks(8), {0, 4, 1, 5, 2, 6, 3, 7});
  CHECK(over_ranks(interleaved, [&](int r) { return interleaved.all_gather(r, 1000); }) ==
        LinkBytes{0, 7 * total});
  // Positions, not ranks, decide who forwards a broadcast: the root's ring predecessor does not.
  CHECK(contiguous.broadcast(1, 10, 6) == LinkBytes{});  // 1 is the last position, 6 the first
  CHECK(contiguous.broadcast(6, 10, 6) == LinkBytes{10, 0});
  CHECK_THROWS_AS(RingTraffic(t, iota_ranks(8), {0, 1, 2}), std::invalid_argument);
  CHECK_THROWS_AS(RingTraffic(t, iota_ranks(4), {0, 1, 1, 2}), std::invalid_argument);
}

TEST_CASE("record: the bytes go to the meter under the phase") {
  TrafficMeter meter;
  record(meter, Phase::kGradReduce, LinkBytes{5, 7});
  record(meter, Phase::kEval, LinkBytes{});
  const TrafficCounts counts = meter.snapshot();
  CHECK(counts.at(Phase::kGradReduce, Link::kIntraNode) == 5);
  CHECK(counts.at(Phase::kGradReduce, Link::kInterNode) == 7);
  CHECK(counts.total() == 12);
}

}  // namespace
}  // namespace gpt::comm
