// The planner at t x d x p (issue 34): on a small model and on the ZeRO++ tutorial's 18B one, the pipeline's
// point-to-point bytes against their closed form, a stage's activations against the micro-batches it keeps in
// flight, a stage's model states against p = 1's, the simulated bubble against (p - 1)/(v m + p - 1), the
// tied wte's gradient sum in grad_reduce, the report's and the JSON line's pipeline parts, the memory guard's
// count for a rank's own stage, and plans the engine would refuse.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "base/user_error.h"
#include "model/params.h"
#include "model/pipeline.h"
#include "train/memory_guard.h"
#include "train/planner.h"
#include "zero/partition.h"
#include "zero/pipeline_schedule.h"

namespace {

// 8 layers of width 64 on 2 nodes x 4 GPUs, fp16, micro-batch 2, 4 micro-batches a step.
gpt::TrainOptions small(int t, int p, int stage = 1) {
  gpt::TrainOptions o;
  o.model.num_layers = 8;
  o.model.hidden = 64;
  o.model.heads = 4;
  o.model.seq_len = 32;
  o.model.max_positions = 32;
  o.model.vocab = 500;
  o.tensor_parallel = t;
  o.pipeline.stages = p;
  o.micro_batch = 2;
  o.accumulation_steps = 4;
  o.zero.stage = stage;
  o.zero.precision = gpt::DType::kF16;
  o.zero.overlap_comm = true;
  o.zero.recompute = gpt::Recompute::selective();
  o.plan.enabled = true;
  o.plan.nodes = 2;
  o.plan.gpus_per_node = 4;
  o.plan.gpu_memory_bytes = 16e9;
  o.plan.intra_node_bytes_per_s = 100e9;
  o.plan.inter_node_bytes_per_s = 10e9;
  o.plan.gpu_tflops = 100;
  return o;
}

const gpt::PlanVariant& configured(const gpt::Plan& plan) {
  return plan.variants[size_t(plan.configured)];
}

uint64_t p2p(const gpt::PlanVariant& v, gpt::comm::Link link) {
  return v.traffic.at(gpt::comm::Phase::kPpP2p, link);
}

}  // namespace

TEST_CASE("pp_p2p: 2 (p v - 1) m d B T C x 2 bytes between stages, and the scatter-gather inside a node") {
  // t = 2, p = 2, d = 2: a stage is 4 ranks, one node; the boundary crosses nodes. Each tensor-parallel rank
  // sends half of [B, T, C]; the receiving pair all-gathers the other half inside its node.
  gpt::TrainOptions o = small(2, 2);
  const uint64_t B = 2, T = 32, C = 64, m = 4, d = 2, t = 2;
  gpt::Plan plan = gpt::make_plan(o);
  CHECK(plan.data_parallel == 2);
  CHECK(p2p(configured(plan), gpt::comm::Link::kInterNode) == 2 * 1 * m * d * B * T * C * 2);
  CHECK(p2p(configured(plan), gpt::comm::Link::kIntraNode) == (t - 1) * 2 * 1 * m * d * B * T * C * 2);
  // p = 4, t = 1, d = 2: two stages a node, so boundaries 0-1 and 2-3 stay inside a node, 1-2 crosses.
  o = small(1, 4);
  plan = gpt::make_plan(o);
  const uint64_t one = 2 * m * 2 * B * T * C * 2;
  CHECK(p2p(configured(plan), gpt::comm::Link::kIntraNode) == 2 * one);
  CHECK(p2p(configured(plan), gpt::comm::Link::kInterNode) == one);
  // Interleaved, v = 2: p v - 1 = 3 boundaries at p = 2 (stage 0 to 1 and 1 to 0 cross nodes).
  o = small(2, 2);
  o.pipeline.layers_per_virtual_stage = 2;
  plan = gpt::make_plan(o);
  CHECK(plan.virtual_stages == 2);
  CHECK(p2p(configured(plan), gpt::comm::Link::kInterNode) == 2 * 3 * m * d * B * T * C * 2);
  CHECK(p2p(configured(plan), gpt::comm::Link::kIntraNode) == (t - 1) * 2 * 3 * m * d * B * T * C * 2);
  // Sequence parallelism: each rank sends its own [B, T/t, C], and nothing is gathered.
  o = small(2, 2);
  o.zero.sequence_parallel = true;
  plan = gpt::make_plan(o);
  CHECK(p2p(configured(plan), gpt::comm::Link::kInterNode) == 2 * m * d * t * B * (T / t) * C * 2);
  CHECK(p2p(configured(plan), gpt::comm::Link::kIntraNode) == 0);
}

TEST_CASE(
    "a stage's activations are one micro-batch's through its layers times the micro-batches in flight") {
  // p = 4 over 8 layers: stages 1 and 2 hold two layers each, without the embedding or the head; 1F1B keeps
  // p - s micro-batches, 3 and 2.
  const gpt::TrainOptions o = small(1, 4);
  CHECK(gpt::max_in_flight(gpt::pipeline_schedule(4, 1, 1, 4)) == 3);
  auto stage = [&](int s) {
    return gpt::plan_memory(o.model, o.zero, 2, 4, o.micro_batch, o.accumulation_steps,
                            gpt::MemoryTarget::kGpu, 1, o.pipeline, s);
  };
  const gpt::PlanMemory s1 = stage(1), s2 = stage(2), s0 = stage(0);
  CHECK(s1.activations == doctest::Approx(1.5 * s2.activations).epsilon(1e-12));
  CHECK(s1.activations_paper == doctest::Approx(1.5 * s2.activations_paper).epsilon(1e-12));
  CHECK(s1.model_states == s2.model_states);
  // Stage 0 keeps 4 micro-batches of its 2 layers (and the embedding's mask in the paper's count): the whole
  // model's layers' worth, as the paper says of 1F1B's first stage.
  const gpt::PlanMemory whole = gpt::plan_memory(o.model, o.zero, 2, 4, o.micro_batch, o.accumulation_steps);
  CHECK(s0.activations_paper > 2 * s2.activations_paper);
  CHECK(s0.activations_paper < whole.activations_paper);  // without the output layer's terms
  // The report plans the busiest stage, the first.
  const gpt::Plan plan = gpt::make_plan(o);
  CHECK(configured(plan).busiest_stage == 0);
  REQUIRE(plan.stages.size() == 4);
  CHECK(plan.stages[0].in_flight == std::vector<int>{4});
  CHECK(plan.stages[3].in_flight == std::vector<int>{1});
  CHECK(plan.stages[1].activations == s1.activations);
}

TEST_CASE("a stage's model states are its own chunks' over d: p = 2 holds about half of p = 1's at stage 1") {
  const gpt::TrainOptions p1 = small(1, 1), p2 = small(2, 2), t2 = small(2, 1);
  const gpt::PlanVariant one = configured(gpt::make_plan(t2)), two = configured(gpt::make_plan(p2));
  // The same data-parallel size (d = 4 at t = 2, p = 1; d = 2 at t = 2, p = 2 over half the layers each).
  CHECK(two.memory.model_states < 0.75 * one.memory.model_states);
  CHECK(two.memory.total < one.memory.total);
  CHECK(configured(gpt::make_plan(p1)).memory.model_states > one.memory.model_states);
}

TEST_CASE("the simulated bubble is (p - 1)/(v m + p - 1) with every stage at the slowest one's ops") {
  gpt::TrainOptions o = small(1, 4);
  gpt::Plan plan = gpt::make_plan(o);
  CHECK(plan.bubble_formula == doctest::Approx(3.0 / 7.0));
  CHECK(configured(plan).timing.bubble == doctest::Approx(plan.bubble_formula).epsilon(1e-9));
  const gpt::PlanTiming& t = configured(plan).timing;
  CHECK(t.pipeline == doctest::Approx((4 + 4 - 1) * (t.forward_op + t.backward_op)).epsilon(1e-9));
  CHECK(t.step > t.pipeline);
  o = small(2, 2);
  o.pipeline.layers_per_virtual_stage = 2;
  plan = gpt::make_plan(o);
  CHECK(plan.bubble_formula == doctest::Approx(1.0 / 9.0));
  CHECK(configured(plan).timing.bubble == doctest::Approx(plan.bubble_formula).epsilon(1e-9));
}

TEST_CASE("the tied wte's gradient sum is in grad_reduce: t x d pairs, each rank sending its fp32 shard") {
  // t = 2 x p = 2 on one node of 4: d = 1, so ZeRO moves nothing and grad_reduce is the tied sum alone.
  gpt::TrainOptions o = small(2, 2);
  const gpt::comm::TrafficCounts all = gpt::plan_step_traffic(o.model, o.zero, 1, 4, 4, 2, o.pipeline);
  const gpt::ParamTable table = gpt::rank_param_table(o.model, 1, gpt::TensorSlice{2, 0}, o.pipeline, 0);
  const gpt::Partition first(table, 1, 1);
  const uint64_t shard = uint64_t(first.unit(gpt::ParamTable::kWte).shard);
  CHECK(shard > 0);
  CHECK(all.at(gpt::comm::Phase::kGradReduce, gpt::comm::Link::kIntraNode) == shard * 4 * 2 * 2);
  CHECK(all.at(gpt::comm::Phase::kGradReduce, gpt::comm::Link::kInterNode) == 0);
  CHECK(all.at(gpt::comm::Phase::kParamGatherFwd, gpt::comm::Link::kIntraNode) == 0);
  CHECK(all.at(gpt::comm::Phase::kPpP2p, gpt::comm::Link::kIntraNode) == 0);  // pipeline_p2p_traffic's
}

TEST_CASE("the report and the JSON line name t, p, v, d, the split, the bubble, memory and the step") {
  const gpt::TrainOptions o = small(2, 2);
  const std::string report = gpt::plan_report(o);
  CHECK(report.find("x p = 2 pipeline stages (1F1B, m = 4 micro-batches a step") != std::string::npos);
  CHECK(report.find("Pipeline stages, stage 1") != std::string::npos);
  CHECK(report.find("embedding + layers 0-3") != std::string::npos);
  CHECK(report.find("layers 4-7 + head") != std::string::npos);
  CHECK(report.find("pp_p2p") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(report.substr(report.rfind("{\"plan\"")))["plan"];
  CHECK(j["parallelism"]["tensor_parallel"] == 2);
  CHECK(j["parallelism"]["pipeline_parallel"] == 2);
  CHECK(j["parallelism"]["virtual_stages"] == 1);
  CHECK(j["parallelism"]["data_parallel"] == 2);
  CHECK(j["pipeline"]["per_stage"].size() == 2);
  CHECK(j["pipeline"]["per_stage"][1]["split"] == "layers 4-7 + head");
  CHECK(j["pipeline"]["bubble_formula"].get<double>() == doctest::Approx(1.0 / 5.0));
  CHECK(j["memory"]["total"].get<double>() > 0);
  for (const auto& v : j["variants"]) {
    if (v.contains("problem")) continue;
    CHECK(v["time_s"]["step"].get<double>() > v["time_s"]["pipeline"].get<double>());
    CHECK(v["bytes"]["pp_p2p"]["inter"].get<uint64_t>() > 0);
  }
  // p = 1 carries no pipeline part.
  const std::string flat = gpt::plan_report(small(2, 1));
  CHECK(flat.find("pipeline") == std::string::npos);
}

TEST_CASE("the memory guard counts a rank's own stage") {
  gpt::TrainOptions o = small(1, 2, 0);
  o.tensor_parallel = 1;
  const gpt::MemoryNeed first = gpt::rank_memory_need(o, 1, 4, 0, 0),
                        last = gpt::rank_memory_need(o, 1, 4, 0, 1);
  gpt::TrainOptions flat = o;
  flat.pipeline = {};
  const gpt::MemoryNeed whole = gpt::rank_memory_need(flat, 1, 4, 0);
  // Stage 0 replicates its half of the model (and wte): below the whole model's states.
  CHECK(first.of("compute weights") < whole.of("compute weights"));
  CHECK(last.of("compute weights") < whole.of("compute weights"));
  CHECK(first.of("activations") > 0);
}

TEST_CASE("plans the engine would refuse, and one it runs: interleaved at ZeRO stage 3") {
  gpt::TrainOptions o = small(2, 3);  // t p = 6 does not divide 8 GPUs
  CHECK_THROWS_AS(gpt::make_plan(o), gpt::UsageError);
  o = small(1, 2);
  o.accumulation_steps = 1;  // fewer micro-batches than stages
  CHECK_THROWS_AS(gpt::make_plan(o), gpt::UsageError);
  o = small(2, 2, 3);
  o.pipeline.layers_per_virtual_stage = 2;  // interleaved at ZeRO stage 3 runs, ZeRO++ too
  const gpt::Plan plan = gpt::make_plan(o);
  for (const gpt::PlanVariant& v : plan.variants) CHECK(v.problem.empty());
  CHECK(configured(plan).memory.total > 0);
}
