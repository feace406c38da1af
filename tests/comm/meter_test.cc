// The traffic meter under real collectives: bytes by phase and link class, summed over ranks, equal the
// closed forms of issue 4 (a ring all-gather or reduce-scatter of E elements of b bytes sends (W-1)*E*b bytes
// in all, N*(W-1)/W*E*b of them across nodes, N >= 2), whatever the topology this binary was launched with;
// and waits are timed in the phase of the operation waited for.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "tests/comm/mpi_test_env.h"

namespace gpt::comm::testing {
namespace {

struct Bytes {
  uint64_t intra = 0;
  uint64_t inter = 0;
};

// The closed form of one ring pass over all W ranks carrying E*b bytes in all (E*b divisible by W).
Bytes ring_closed_form(uint64_t total_bytes) {
  const Topology& t = world().topology();
  const uint64_t w = t.world_size, n = t.num_nodes();
  const uint64_t all = (w - 1) * total_bytes;
  const uint64_t inter = n >= 2 ? n * (w - 1) * (total_bytes / w) : 0;
  return Bytes{all - inter, inter};
}

void check_phase(const TrafficCounts& sum, Phase phase, Bytes expected) {
  INFO("phase ", phase_name(phase), "; measured: ", sum.describe());
  CHECK(sum.at(phase, Link::kIntraNode) == expected.intra);
  CHECK(sum.at(phase, Link::kInterNode) == expected.inter);
}

TEST_CASE("meter: ring gathers, reductions and the broadcast chain match their closed forms") {
  Communicator& comm = world();
  const Topology& t = comm.topology();
  const int w = comm.size(), r = comm.rank();
  const TrafficCounts before = comm.meter().snapshot();

  // param_gather_fwd: E*b = W * 3000 bytes; param_gather_bwd: W * 1234 bytes (odd per rank).
  std::vector<uint8_t> mine(3000, 1), all(3000 * w);
  comm.all_gather(mine.data(), all.data(), 3000, Phase::kParamGatherFwd).wait();
  comm.all_gather(mine.data(), all.data(), 1234, Phase::kParamGatherBwd).wait();
  // grad_reduce: fp16 reduce-scatter of E = W * 1000 elements (b = 2).
  std::vector<uint16_t> grads(1000 * w, 0x3c00);
  std::vector<float> shard(1000);
  comm.reduce_scatter(grads.data(), DType::kF16, shard.data(), 1000, 1.0f / w, Phase::kGradReduce).wait();
  // eval: an all-reduce is two ring passes of E = W * 600 bf16 elements.
  std::vector<uint16_t> data(600 * w, 0x3f80);
  comm.all_reduce(data.data(), DType::kBF16, data.size(), 1.0f, Phase::kEval).wait();
  // other: the broadcast chain from root 1 crosses every node boundary but the one it starts on, and the
  // barrier sends no payload.
  const int root = 1 % w;
  std::vector<uint8_t> payload(5000, 2);
  comm.broadcast(payload.data(), payload.size(), root, Phase::kOther).wait();
  comm.barrier().wait();

  const TrafficCounts sum = sum_over_ranks(comm, comm.meter().snapshot() - before);
  INFO("world rank ", r, ", ", t.describe());
  check_phase(sum, Phase::kParamGatherFwd, ring_closed_form(uint64_t(w) * 3000));
  check_phase(sum, Phase::kParamGatherBwd, ring_closed_form(uint64_t(w) * 1234));
  check_phase(sum, Phase::kGradReduce, ring_closed_form(uint64_t(w) * 1000 * 2));
  const Bytes pass = ring_closed_form(uint64_t(w) * 600 * 2);
  check_phase(sum, Phase::kEval, Bytes{2 * pass.intra, 2 * pass.inter});
  const uint64_t n = t.num_nodes(), crossing = n >= 2 ? n - (root % t.ranks_per_node == 0 ? 1 : 0) : 0;
  check_phase(sum, Phase::kOther, Bytes{(w - 1 - crossing) * 5000, crossing * 5000});
}

TEST_CASE("meter: an uneven all_to_all_v counts each block by its destination's node") {
  Communicator& comm = world();
  const Topology& t = comm.topology();
  const int w = comm.size(), r = comm.rank();
  auto block = [](int from, int to) -> size_t { return size_t(37 * from + 101 * to) % 300; };
  std::vector<size_t> send_bytes(w), recv_bytes(w);
  for (int p = 0; p < w; ++p) {
    send_bytes[p] = block(r, p);
    recv_bytes[p] = block(p, r);
  }
  std::vector<uint8_t> send(300 * w), recv(300 * w);
  const TrafficCounts before = comm.meter().snapshot();
  comm.all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes, Phase::kGradReduce).wait();
  const TrafficCounts sum = sum_over_ranks(comm, comm.meter().snapshot() - before);
  Bytes expected;
  for (int from = 0; from < w; ++from) {
    for (int to = 0; to < w; ++to) {
      if (from == to) continue;  // local copies are not traffic
      (t.node_of(from) == t.node_of(to) ? expected.intra : expected.inter) += block(from, to);
    }
  }
  check_phase(sum, Phase::kGradReduce, expected);
}

TEST_CASE("sum_over_ranks: exact 64-bit sums, and its own traffic only in later snapshots") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  TrafficCounts synthetic;
  for (int p = 0; p < kNumPhases; ++p) {
    synthetic.bytes[p][0] = (uint64_t(1) << 40) + uint64_t(r) * 3 + p;  // beyond what a float sum keeps
    synthetic.bytes[p][1] = uint64_t(r) * 1000 + p;
    synthetic.wait_ms[p] = 0.25 * r;
  }
  const TrafficCounts first = comm.meter().snapshot();
  const TrafficCounts sum = sum_over_ranks(comm, synthetic);
  const TrafficCounts second = comm.meter().snapshot();
  const uint64_t rank_sum = uint64_t(w) * (w - 1) / 2;
  for (int p = 0; p < kNumPhases; ++p) {
    CHECK(sum.bytes[p][0] == uint64_t(w) * ((uint64_t(1) << 40) + p) + 3 * rank_sum);
    CHECK(sum.bytes[p][1] == 1000 * rank_sum + uint64_t(w) * p);
    CHECK(sum.wait_ms[p] == doctest::Approx(0.25 * rank_sum));
  }
  // It gathered 3 words of 8 bytes per phase from every rank: W-1 messages sent by this rank, in kOther.
  const TrafficCounts own = second - first;
  CHECK(own.at(Phase::kOther) == uint64_t(w - 1) * 3 * kNumPhases * 8);
  CHECK(own.total() == own.at(Phase::kOther));
}

TEST_CASE("meter: time blocked in wait() goes to the operation's phase") {
  Communicator& comm = world();
  if (comm.size() == 1) return;
  comm.barrier().wait();
  const TrafficCounts before = comm.meter().snapshot();
  if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<uint8_t> mine(16), all(16 * comm.size());
  comm.all_gather(mine.data(), all.data(), 16, Phase::kEval).wait();
  const TrafficCounts waited = comm.meter().snapshot() - before;
  INFO("world rank ", comm.rank(), ": ", waited.describe());
  if (comm.rank() != 0) CHECK(waited.wait_ms[int(Phase::kEval)] >= 100.0);
  CHECK(waited.wait_ms[int(Phase::kParamGatherFwd)] == 0.0);
}

}  // namespace
}  // namespace gpt::comm::testing
