// Subgroups and asynchrony: the groups the engine builds (node, cross-node, hpZ, a second world), many
// operations in flight at once on one communicator and on several, issued in different orders on different
// ranks and from several threads, with results checked byte for byte.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <thread>

#include "tests/comm/mpi_test_env.h"
#include "tests/comm/reference.h"

namespace gpt::comm::testing {
namespace {

std::vector<int> node_ranks(const Topology& t) {
  std::vector<int> ranks(t.ranks_per_node);
  std::iota(ranks.begin(), ranks.end(), t.node() * t.ranks_per_node);
  return ranks;
}

std::vector<int> cross_node_ranks(const Topology& t) {
  std::vector<int> ranks;
  for (int n = 0; n < t.num_nodes(); ++n) ranks.push_back(n * t.ranks_per_node + t.local_rank());
  return ranks;
}

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(size);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// Starts an all-gather of a per-(group, rank, seed) pattern; check_gather verifies it after the wait.
struct Gather {
  std::vector<uint8_t> mine, all;
  Request request;
};

Gather start_gather(Communicator& comm, size_t bytes, int seed) {
  Gather g;
  g.mine = pattern(comm.world_rank_of(comm.rank()), bytes, seed);
  g.all.resize(bytes * comm.size());
  g.request = comm.all_gather(g.mine.data(), g.all.data(), bytes, Phase::kParamGatherFwd);
  return g;
}

bool check_gather(Communicator& comm, Gather& g, int seed) {
  g.request.wait();
  const size_t bytes = g.mine.size();
  for (int p = 0; p < comm.size(); ++p) {
    if (pattern(comm.world_rank_of(p), bytes, seed) !=
        std::vector<uint8_t>(g.all.begin() + p * bytes, g.all.begin() + (p + 1) * bytes)) {
      return false;
    }
  }
  return true;
}

TEST_CASE("subgroup: node, cross-node and hpZ groups know their ranks; non-members get nullptr") {
  Communicator& comm = world();
  const Topology& t = comm.topology();
  const int me = t.world_rank;
  INFO("world rank ", me, ", ", t.describe());

  auto node = comm.subgroup(node_ranks(t));
  REQUIRE(node);  // local: every rank is in its own node's list
  CHECK(node->size() == t.ranks_per_node);
  CHECK(node->rank() == t.local_rank());
  CHECK(node->world_rank_of(0) == t.node() * t.ranks_per_node);
  CHECK(&node->meter() == &comm.meter());

  auto cross = comm.subgroup(cross_node_ranks(t));
  REQUIRE(cross);
  CHECK(cross->size() == t.num_nodes());
  CHECK(cross->rank() == t.node());

  auto only_rank_zero = comm.subgroup({0});
  CHECK((only_rank_zero != nullptr) == (me == 0));
  if (only_rank_zero) CHECK(only_rank_zero->size() == 1);

  // A subgroup of a subgroup: the first rank of every node, within its node group.
  auto node_head = node->subgroup({t.node() * t.ranks_per_node});
  CHECK((node_head != nullptr) == (t.local_rank() == 0));

  CHECK_THROWS_AS(comm.subgroup({me, me}), std::invalid_argument);
  if (t.num_nodes() > 1) {
    const int elsewhere = (me + t.ranks_per_node) % t.world_size;
    CHECK_THROWS_AS(node->subgroup({me, elsewhere}), std::invalid_argument);
  }
}

TEST_CASE("async: operations on different groups overlap and need no common issue order") {
  Communicator& comm = world();
  const Topology& t = comm.topology();
  const int me = t.world_rank;
  auto node = comm.subgroup(node_ranks(t));
  auto cross = comm.subgroup(cross_node_ranks(t));
  const int h = t.world_size % 2 == 0 ? 2 : 1;  // hpZ: groups of h consecutive ranks
  std::vector<int> hpz_ranks(h);
  std::iota(hpz_ranks.begin(), hpz_ranks.end(), me - me % h);
  auto hpz = comm.subgroup(hpz_ranks);
  auto world2 = comm.subgroup(all_ranks(t.world_size));
  INFO("world rank ", me, ", ", t.describe());

  // Different ranks issue the groups' operations in different orders; each group's own order is the same.
  for (int round = 0; round < 3; ++round) {
    Gather a, b, c, d;
    if (me % 2 == 0) {
      a = start_gather(*node, 5000 + round, 100 + round);
      b = start_gather(*cross, 7001, 200 + round);
      c = start_gather(*hpz, 333, 300 + round);
      d = start_gather(*world2, 65536, 400 + round);
    } else {
      d = start_gather(*world2, 65536, 400 + round);
      c = start_gather(*hpz, 333, 300 + round);
      b = start_gather(*cross, 7001, 200 + round);
      a = start_gather(*node, 5000 + round, 100 + round);
    }
    CHECK(check_gather(*world2, d, 400 + round));
    CHECK(check_gather(*node, a, 100 + round));
    CHECK(check_gather(*hpz, c, 300 + round));
    CHECK(check_gather(*cross, b, 200 + round));
  }

  // An operation stuck on one communicator (rank 0 has not issued it yet) does not hold back another:
  // with one queue for both, the other ranks would wait for rank 0, and rank 0 for them.
  if (t.world_size > 1) {
    Gather stuck, free;
    if (me == 0) {
      free = start_gather(*world2, 100, 7);
      CHECK(check_gather(*world2, free, 7));
      stuck = start_gather(comm, 100, 8);
    } else {
      stuck = start_gather(comm, 100, 8);
      free = start_gather(*world2, 100, 7);
      CHECK(check_gather(*world2, free, 7));
    }
    CHECK(check_gather(comm, stuck, 8));
  }
}

TEST_CASE("async: many operations in flight on one communicator complete in order, waited in any order") {
  Communicator& comm = world();
  std::vector<Gather> gathers;
  for (int k = 0; k < 12; ++k) gathers.push_back(start_gather(comm, 1000 + 997 * k, 500 + k));
  std::vector<uint16_t> sums(4096, 0x3c00);  // fp16 ones, all-reduced in the middle of the gathers
  Request reduce = comm.all_reduce(sums.data(), DType::kF16, sums.size(), 1.0f, Phase::kGradReduce);
  for (int k = 12; k < 16; ++k) gathers.push_back(start_gather(comm, 1000 + 997 * k, 500 + k));
  bool all_right = true;
  for (int k = 15; k >= 0; --k) all_right &= check_gather(comm, gathers[k], 500 + k);
  reduce.wait();
  CHECK(all_right);
  CHECK(decode(sums.data(), 4095, DType::kF16) == float(comm.size()));
  CHECK(session().comm_thread_cpu_seconds() > 0.0);
}

TEST_CASE("async: two caller threads issue on their own communicators at the same time") {
  Communicator& comm = world();
  auto second = comm.subgroup(all_ranks(comm.size()));
  bool first_ok = true, second_ok = true;
  auto work = [](Communicator* c, int seed, bool* ok) {
    for (int k = 0; k < 20; ++k) {
      Gather g = start_gather(*c, 512 + 64 * k, seed + k);
      *ok &= check_gather(*c, g, seed + k);
    }
  };
  std::thread other(work, second.get(), 900, &second_ok);
  work(&comm, 800, &first_ok);
  other.join();
  CHECK(first_ok);
  CHECK(second_ok);
}

TEST_CASE("async: an all-gather hands out each rank's block as it lands, before the whole gather is done") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  // Rank 0 joins the gather only after every other rank has checked its early blocks, so none of them can
  // have the whole gather yet: a block handed out then was reported on its own.
  auto signal = comm.subgroup(all_ranks(w));
  const size_t bytes = 4099;
  const std::vector<uint8_t> mine = pattern(r, bytes, 21);
  std::vector<uint8_t> all(w * bytes);
  auto block_is_right = [&](int p) {
    return pattern(p, bytes, 21) ==
           std::vector<uint8_t>(all.begin() + p * bytes, all.begin() + (p + 1) * bytes);
  };
  if (r == 0) signal->barrier().wait();
  Request request = comm.all_gather(mine.data(), all.data(), bytes, Phase::kParamGatherFwd);
  if (r != 0) {
    request.wait_block(r);  // its own block is in place from the start
    CHECK(block_is_right(r));
    if (r >= 2) {  // the left neighbour sends its own block at once; that needs nothing from rank 0
      request.wait_block(r - 1);
      CHECK(block_is_right(r - 1));
    }
    CHECK_FALSE(request.done());
    signal->barrier().wait();
  }
  bool every_block_right = true;
  for (int k = 0; k < w; ++k) {  // the ring's order of arrival, then the others' (already there)
    const int block = (r - k + w) % w;
    request.wait_block(block);
    every_block_right &= block_is_right(block);
  }
  request.wait();
  CHECK(every_block_right);
}

}  // namespace
}  // namespace gpt::comm::testing
