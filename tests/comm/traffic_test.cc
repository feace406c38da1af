// The parts of the communication room that need no MPI: the meter (thread safety included), its counts'
// arithmetic and names, topologies and their one-line errors, and the fp32 accumulation on wire dtypes.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/traffic.h"
#include "comm/wire_reduce.h"
#include "tensor/half.h"

namespace gpt::comm {
namespace {

TEST_CASE("phase and link names are the metrics file's") {
  CHECK(std::string(phase_name(Phase::kParamGatherFwd)) == "param_gather_fwd");
  CHECK(std::string(phase_name(Phase::kParamGatherBwd)) == "param_gather_bwd");
  CHECK(std::string(phase_name(Phase::kGradReduce)) == "grad_reduce");
  CHECK(std::string(phase_name(Phase::kEval)) == "eval");
  CHECK(std::string(phase_name(Phase::kOther)) == "other");
  CHECK(std::string(link_name(Link::kIntraNode)) == "intra");
  CHECK(std::string(link_name(Link::kInterNode)) == "inter");
}

TEST_CASE("TrafficCounts: totals, sums and differences") {
  TrafficCounts a, b;
  a.bytes[int(Phase::kGradReduce)][int(Link::kInterNode)] = 10;
  a.bytes[int(Phase::kEval)][int(Link::kIntraNode)] = 5;
  a.wait_ms[int(Phase::kEval)] = 1.5;
  b.bytes[int(Phase::kGradReduce)][int(Link::kInterNode)] = 3;
  b.wait_ms[int(Phase::kEval)] = 0.5;
  CHECK(a.total(Link::kInterNode) == 10);
  CHECK(a.total(Link::kIntraNode) == 5);
  CHECK(a.total() == 15);
  CHECK(a.at(Phase::kGradReduce) == 10);
  const TrafficCounts sum = a + b, diff = a - b;
  CHECK(sum.at(Phase::kGradReduce, Link::kInterNode) == 13);
  CHECK(diff.at(Phase::kGradReduce, Link::kInterNode) == 7);
  CHECK(diff.wait_ms[int(Phase::kEval)] == 1.0);
  CHECK(diff + b == a);
  CHECK(a.describe().find("grad_reduce intra=0 inter=10") != std::string::npos);
}

TEST_CASE("TrafficMeter: concurrent records from several threads all count") {
  TrafficMeter meter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&meter, t] {
      for (int i = 0; i < 100000; ++i) {
        meter.record_send(Phase(i % kNumPhases), Link(t % 2), 3);
        if (i % 100 == 0) meter.record_wait(Phase::kOther, 0.5);
        if (i % 1000 == 0) (void)meter.snapshot();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const TrafficCounts counts = meter.snapshot();
  CHECK(counts.total() == 4ull * 100000 * 3);
  CHECK(counts.total(Link::kIntraNode) == 2ull * 100000 * 3);
  CHECK(counts.at(Phase::kEval) == 4ull * (100000 / kNumPhases) * 3);  // 100000 is a multiple of 8 phases
  CHECK(counts.wait_ms[int(Phase::kOther)] == doctest::Approx(4 * 1000 * 0.5));
  meter.reset();
  CHECK(meter.snapshot() == TrafficCounts{});
}

TEST_CASE("Topology: nodes of consecutive ranks") {
  const Topology t = make_topology(8, 5, 4, true);
  CHECK(t.num_nodes() == 2);
  CHECK(t.node() == 1);
  CHECK(t.local_rank() == 1);
  CHECK(t.node_of(3) == 0);
  CHECK(t.describe() == "2 nodes x 4 ranks per node (simulated)");
  CHECK(make_topology(1, 0, 1, false).describe() == "1 node x 1 rank per node");
}

TEST_CASE(
    "Topology: a ranks-per-node that does not divide the world is one line naming the flag and the fix") {
  try {
    make_topology(6, 0, 4, true);
    FAIL("no TopologyError");
  } catch (const TopologyError& e) {
    CHECK(std::string(e.what()) ==
          "--ranks-per-node 4 does not divide the world size 6 (mpiexec -n 6); use one of 1, 2, 3, 6, or "
          "launch a "
          "multiple of 4 ranks");
  }
  CHECK_THROWS_AS(make_topology(4, 0, 0, true), TopologyError);
  CHECK_THROWS_AS(make_topology(4, 0, 8, true), TopologyError);
  CHECK_THROWS_AS(make_topology(4, 4, 2, true), std::invalid_argument);
}

TEST_CASE("wire reductions add in fp32 and round once per hop") {
  // 2048 + 1 is not an fp16 value (spacing 2 there); 2048 + 1 + 1 in fp32 then rounded is 2050 exactly.
  const uint16_t a = f32_to_f16(2048.0f), b = f32_to_f16(1.0f);
  uint16_t out;
  add_to_wire(&a, &b, &out, DType::kF16, 1);
  CHECK(f16_to_f32(out) == 2048.0f);  // 2049 ties to even
  float final_sum;
  add_final(&a, &b, &final_sum, 0.5f, DType::kF16, 1);
  CHECK(final_sum == 1024.5f);  // kept in fp32: no rounding to fp16 at the last hop
  const uint16_t c = f32_to_bf16(256.0f), d = f32_to_bf16(1.0f);
  add_to_wire(&c, &d, &out, DType::kBF16, 1);
  CHECK(bf16_to_f32(out) == 256.0f);  // 257 ties to even in bf16 (spacing 2 at 256)
  const float x = 1.0f, y = 0x1.0p-30f;
  float z;
  add_to_wire(&x, &y, &z, DType::kF32, 1);
  CHECK(z == 1.0f);
  CHECK(!is_reducible(DType::kI8));
  CHECK_THROWS_AS(add_to_wire(&a, &b, &out, DType::kI8, 1), std::invalid_argument);
}

TEST_CASE("Request: a default-constructed one is complete") {
  Request request;
  CHECK(request.done());
  request.wait();
}

}  // namespace
}  // namespace gpt::comm
