// Pipeline schedules (zero/pipeline_schedule.h): each stage runs every micro-batch's forward and backward
// through each of its chunks once, backwards after forwards; 1F1B keeps at most p - s micro-batches in
// flight; the simulated timeline's bubble equals (p - 1) / (v m + p - 1) exactly for 1F1B and interleaved
// with equal chunk times; and too few micro-batches are refused in one line.
#include "zero/pipeline_schedule.h"

#include <doctest/doctest.h>

#include <set>
#include <stdexcept>
#include <tuple>

namespace gpt {
namespace {

void check_complete(int p, int s, int v, int m) {
  const std::vector<PipelineOp> ops = pipeline_schedule(p, s, v, m);
  REQUIRE(ops.size() == size_t(2 * m * v));
  std::set<std::tuple<int, int, int>> seen;
  for (const PipelineOp& op : ops) {
    CHECK(op.micro_batch >= 0);
    CHECK(op.micro_batch < m);
    CHECK(op.chunk >= 0);
    CHECK(op.chunk < v);
    CHECK(seen.insert({op.kind, op.micro_batch, op.chunk}).second);  // once each
    if (op.kind == PipelineOp::kBackward) {
      CHECK(seen.count({PipelineOp::kForward, op.micro_batch, op.chunk}) == 1);  // after its forward
    }
  }
}

TEST_CASE("1F1B: warm-up, one forward and one backward at a time, drain; at most p - s in flight") {
  using K = PipelineOp::Kind;
  const std::vector<PipelineOp> first = pipeline_schedule(2, 0, 1, 4);
  const std::vector<PipelineOp> expected = {{K::kForward, 0, 0},  {K::kForward, 1, 0},  {K::kBackward, 0, 0},
                                            {K::kForward, 2, 0},  {K::kBackward, 1, 0}, {K::kForward, 3, 0},
                                            {K::kBackward, 2, 0}, {K::kBackward, 3, 0}};
  CHECK(first == expected);
  for (int p : {1, 2, 4}) {
    for (int m : {p, 2 * p + 1, 16}) {
      for (int s = 0; s < p; ++s) {
        INFO(p << " " << m << " " << s);
        check_complete(p, s, 1, m);
        CHECK(max_in_flight(pipeline_schedule(p, s, 1, m)) == std::min(p - s, m));
      }
    }
  }
}

TEST_CASE("interleaved: every micro-batch through every chunk, forwards before backwards") {
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        for (int s = 0; s < p; ++s) {
          INFO(p << " " << v << " " << m << " " << s);
          check_complete(p, s, v, m);
        }
      }
    }
  }
}

TEST_CASE("the simulated bubble is (p - 1) / (v m + p - 1) of the step") {
  for (int p : {1, 2, 4}) {
    for (int m : {2, 4, 8, 16}) {
      if (m < p) continue;
      INFO(p << " " << m);
      const PipelineTimeline t = simulate_pipeline(p, 1, m, 1.0, 2.0);
      CHECK(t.step == doctest::Approx((m + p - 1) * 3.0));
      CHECK(t.bubble == doctest::Approx(pipeline_bubble_formula(p, 1, m)));
      for (double idle : t.idle_share) CHECK(idle == doctest::Approx(t.bubble));
    }
  }
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        INFO(p << " " << v << " " << m);
        // Each chunk is 1/v of a stage's layers: its forward and backward take 1/v of the stage's.
        const PipelineTimeline t = simulate_pipeline(p, v, m, 1.0 / v, 2.0 / v);
        CHECK(t.bubble == doctest::Approx(pipeline_bubble_formula(p, v, m)));
      }
    }
  }
}

TEST_CASE("too few micro-batches, or a partial group for interleaving, are refused in one line") {
  CHECK(pipeline_schedule_problem(4, 1, 3).find("3 micro-batches per step are fewer than the 4") == 0);
  CHECK(pipeline_schedule_problem(2, 2, 3).find("groups of the 2 pipeline stages, got 3") !=
        std::string::npos);
  CHECK(pipeline_schedule_problem(2, 1, 3).empty());
  CHECK_THROWS_AS(pipeline_schedule(4, 0, 1, 2), std::invalid_argument);
}

}  // namespace
}  // namespace gpt
