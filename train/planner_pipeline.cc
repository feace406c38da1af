// The planner at t x d x p (pipeline stages, p > 1); see planner.h. Each stage is planned as a rank of its
// own t x d ranks holding its chunks (stage_param_table) with the micro-batches its schedule keeps in flight;
// the plan reports the stage that needs the most memory, and the step as the pipeline's timeline at the
// slowest stage's op times plus what each stage cannot overlap (the same model as at p = 1, applied to the
// stage).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "train/planner_pipeline.h"
#include "zero/engine.h"
#include "zero/partition.h"
#include "zero/pipeline_schedule.h"
#include "zero/traffic_model.h"

namespace gpt {
namespace {

Partition stage_partition(const Plan& plan, const ZeroConfig& zero, int stage) {
  const ParamTable table = rank_param_table(plan.model, zero.tile_factor,
                                            TensorSlice{plan.tensor_parallel, 0}, plan.pipeline, stage);
  return Partition(table, plan.data_parallel, zero.stage == 0 ? 1 : plan.data_parallel);
}

// The node of a stage's first rank (ranks ordered tensor, data, pipeline: a stage is t x d consecutive
// ranks).
int node_of_stage(int stage, int stage_ranks, int ranks_per_node) {
  return stage * stage_ranks / ranks_per_node;
}

// One stage's ZeRO phases, all its ranks: t data-parallel groups over the stage's table.
comm::TrafficCounts stage_zero_traffic(const GPTConfig& model, const ZeroConfig& zero, int nodes,
                                       int ranks_per_node, int accumulation_steps, int t,
                                       const PipelineLayout& layout, int stage) {
  const int p = layout.stages, d = nodes * ranks_per_node / (t * p);
  const ParamTable table = rank_param_table(model, zero.tile_factor, TensorSlice{t, 0}, layout, stage);
  const Partition partition(table, d, zero.stage == 0 ? 1 : d);
  const comm::Topology world{nodes * ranks_per_node, 0, ranks_per_node, false};
  const int dp_per_node =
      p == 1 ? ranks_per_node / t : ZeroEngine::data_parallel_topology(world, t, 0, p).ranks_per_node;
  const comm::TrafficCounts group =
      expected_step_traffic(TrafficModelInput{&partition, zero, dp_per_node, accumulation_steps});
  comm::TrafficCounts all;
  for (int g = 0; g < t; ++g) all += group;
  return all;
}

// The tied wte's gradient sum (ZeroEngine::sum_tied_embedding): each of the first stage's t x d ranks and its
// partner on the last stage all-reduce the fp32 shard of wte, each sending it once (half in the ring's
// reduce-scatter, half in its all-gather). Inter-node unless the whole pipeline is on one node.
void add_tied_embedding(const GPTConfig& model, const ZeroConfig& zero, int nodes, int ranks_per_node, int t,
                        const PipelineLayout& layout, comm::TrafficCounts& traffic) {
  const int p = layout.stages, d = nodes * ranks_per_node / (t * p);
  const ParamTable table = rank_param_table(model, zero.tile_factor, TensorSlice{t, 0}, layout, 0);
  const Partition partition(table, d, zero.stage == 0 ? 1 : d);
  const uint64_t bytes = uint64_t(partition.unit(ParamTable::kWte).shard) * 4 * 2 * uint64_t(t) * uint64_t(d);
  traffic.bytes[int(comm::Phase::kGradReduce)][nodes == 1 ? 0 : 1] += bytes;
}

// Megatron's scatter-gather (t > 1 without sequence parallelism, ZeroEngine::scatter_gathers): each
// tensor-parallel rank sends 1/t of the boundary tensor and the receiving group all-gathers it inside its
// node.
bool scatter_gathers(int tensor_parallel, bool sequence_parallel) {
  return tensor_parallel > 1 && !sequence_parallel;
}

// What one rank sends to the next stage per message: [B, T, C] / t with the scatter-gather, its [B, T/t, C]
// with sequence parallelism, else [B, T, C].
double message_bytes(const Plan& plan, int element_bytes) {
  const int t = plan.tensor_parallel;
  return double(plan.micro_batch) * plan.model.seq_len * plan.model.hidden * element_bytes / t;
}

// One message's time: a node's GPUs all send theirs at once, sharing its inter-node link when a boundary
// crosses nodes (the slower class where a pipeline has both); then the scatter-gather's all-gather of the
// other t - 1 parts inside the node.
double message_seconds(const Plan& plan, const comm::TrafficCounts& p2p, int element_bytes) {
  const PlanOptions& c = plan.cluster;
  const double bytes = message_bytes(plan, element_bytes);
  const bool inter = p2p.at(comm::Phase::kPpP2p, comm::Link::kInterNode) > 0;
  const bool intra = p2p.at(comm::Phase::kPpP2p, comm::Link::kIntraNode) > 0;
  const double gather = scatter_gathers(plan.tensor_parallel, plan.sequence_parallel)
                            ? bytes * (plan.tensor_parallel - 1) / c.intra_node_bytes_per_s
                            : 0;
  return std::max(inter ? bytes * c.gpus_per_node / c.inter_node_bytes_per_s : 0,
                  intra ? bytes / c.intra_node_bytes_per_s : 0) +
         gather;
}

// The plan as one stage sees it: its t x d ranks on the nodes its data-parallel group spans, its table's
// padded parameters and gather units, its share of the tensor-parallel collectives.
Plan stage_view(const Plan& plan, const Partition& partition, int layers, int data_parallel_nodes) {
  Plan s = plan;
  s.world = plan.tensor_parallel * plan.data_parallel;
  s.cluster.nodes = data_parallel_nodes;
  s.padded_params = partition.padded_total();
  s.gather_units = 0;
  s.first_unit_share = 0;
  for (const UnitPartition& u : partition.units()) {
    if (u.padded == 0) continue;
    if (s.gather_units++ == 0) s.first_unit_share = double(u.padded) / double(s.padded_params);
  }
  // plan.tensor_*_s are all ranks' bytes over the world: p times that is a rank's whole model.
  const double share = double(plan.pipeline.stages) * layers / plan.model.num_layers;
  s.tensor_forward_s = plan.tensor_forward_s * share;
  s.tensor_backward_s = plan.tensor_backward_s * share;
  return s;
}

struct StageCost {
  StagePlacement at;
  int layers = 0;
  double flops = 0;  // per token
  PlanMemory memory;
  PlanTiming timing;  // the stage alone, as if it had no neighbours
};

// The stages whose memory a variant plans: all of them for the configured variant (the stage table), else
// the first, the last and stage 1, which holds the same chunks as every middle stage and at least as many
// micro-batches in flight (1F1B: p - s; interleaved: fewer warm-up forwards further down).
bool memory_planned(const Plan& plan, const PlanVariant& v, int stage) {
  const int p = plan.pipeline.stages;
  return v.configured || stage == 0 || stage == 1 || stage == p - 1;
}

StageCost stage_cost(const Plan& plan, const PlanVariant& v, int stage, const PlanMemory* memory) {
  const PlanOptions& c = plan.cluster;
  StageCost cost;
  cost.at = stage_placement(plan.model, plan.pipeline, stage, c.nodes, c.gpus_per_node, plan.tensor_parallel,
                            plan.accumulation_steps);
  for (const PipelineChunk& chunk : cost.at.chunks) {
    cost.layers += chunk.layers();
    cost.flops += chunk_flops_per_token(plan.model, chunk);
  }
  cost.memory = memory ? *memory
                       : plan_memory(plan.model, v.zero, c.nodes, c.gpus_per_node, plan.micro_batch,
                                     plan.accumulation_steps, MemoryTarget::kGpu, plan.tensor_parallel,
                                     plan.pipeline, stage);
  PlanVariant sv = v;
  sv.memory = cost.memory;
  sv.traffic = stage_zero_traffic(plan.model, v.zero, c.nodes, c.gpus_per_node, plan.accumulation_steps,
                                  plan.tensor_parallel, plan.pipeline, stage);
  const Plan view =
      stage_view(plan, stage_partition(plan, v.zero, stage), cost.layers, cost.at.data_parallel_nodes);
  const double recompute =
      recompute_flops_per_token(plan.model, v.zero.recompute) * cost.layers / plan.model.num_layers;
  cost.timing = predict_time(view, sv, PlanWork{cost.flops, recompute});
  return cost;
}

std::string split_of(const std::vector<PipelineChunk>& chunks) {
  std::string what;
  for (const PipelineChunk& c : chunks) {
    what += std::string(what.empty() ? "" : ", ") + (c.embedding ? "embedding + " : "") + "layers " +
            std::to_string(c.first_layer) + "-" + std::to_string(c.end_layer - 1) + (c.head ? " + head" : "");
  }
  return what;
}

PlanStage stage_row(const Plan& plan, int stage, const StageCost& cost, double message) {
  const int ops = plan.accumulation_steps * plan.virtual_stages;
  PlanStage row;
  row.stage = stage;
  row.split = split_of(cost.at.chunks);
  row.layers = cost.layers;
  row.flops_share = cost.flops / plan.model.model_flops_per_token();
  row.in_flight = cost.at.in_flight;
  row.model_states = cost.memory.model_states;
  row.activations = cost.memory.activations;
  row.memory = cost.memory.tiers.device;
  row.forward_op = cost.timing.forward_pass / ops + message;
  row.backward_op = cost.timing.backward_pass / ops + message;
  return row;
}

// The variant's timing from its stages': each op the slowest stage's, the timeline over the step's
// micro-batches, then the most any stage adds outside its passes and the tied wte's sum.
PlanTiming pipeline_timing(const Plan& plan, const std::vector<StageCost>& costs,
                           const std::vector<PlanStage>& rows, double message, double tied_bytes) {
  const PlanOptions& c = plan.cluster;
  PlanTiming t;
  size_t slowest = 0;
  double beyond = 0;
  for (size_t s = 0; s < rows.size(); ++s) {
    if (rows[s].forward_op + rows[s].backward_op > rows[slowest].forward_op + rows[slowest].backward_op)
      slowest = s;
    const PlanTiming& st = costs[s].timing;
    beyond = std::max(beyond, st.step - st.forward_pass - st.backward_pass);
    for (int p = 0; p < 3; ++p) {
      t.comm[size_t(p)] = std::max(t.comm[size_t(p)], st.comm[size_t(p)]);
      for (int l = 0; l < 2; ++l)
        t.link[size_t(p)][size_t(l)] = std::max(t.link[size_t(p)][size_t(l)], st.link[size_t(p)][size_t(l)]);
    }
  }
  const PlanTiming& busiest = costs[slowest].timing;
  t.compute_forward = busiest.compute_forward;
  t.compute_backward = busiest.compute_backward;
  t.tensor_forward = busiest.tensor_forward;
  t.tensor_backward = busiest.tensor_backward;
  t.host_forward = busiest.host_forward;
  t.host_backward = busiest.host_backward;
  t.optimizer = busiest.optimizer;
  t.latency = busiest.latency;
  t.exposed = busiest.exposed;
  t.nvme_read = busiest.nvme_read;
  t.nvme_write = busiest.nvme_write;
  t.forward_op = rows[slowest].forward_op;
  t.backward_op = rows[slowest].backward_op;
  t.p2p = message;
  const PipelineTimeline timeline = simulate_pipeline(plan.pipeline.stages, plan.virtual_stages,
                                                      plan.accumulation_steps, t.forward_op, t.backward_op);
  t.pipeline = timeline.step;
  t.bubble = timeline.bubble;
  t.forward_pass = t.forward_op * plan.accumulation_steps * plan.virtual_stages;
  t.backward_pass = t.backward_op * plan.accumulation_steps * plan.virtual_stages;
  // The tied wte's sum: every first-stage rank sends its bytes at once.
  t.tied_embedding = c.nodes == 1 ? tied_bytes / c.intra_node_bytes_per_s
                                  : tied_bytes * c.gpus_per_node / c.inter_node_bytes_per_s;
  t.step = t.pipeline + beyond + t.tied_embedding;
  t.tokens_per_s = t.step > 0 ? double(plan.global_batch) * plan.model.seq_len / t.step : 0;
  return t;
}

}  // namespace

StagePlacement stage_placement(const GPTConfig& model, const PipelineLayout& layout, int stage, int nodes,
                               int ranks_per_node, int tensor_parallel, int micro_batches) {
  StagePlacement at;
  const int p = layout.stages, world = nodes * ranks_per_node;
  if (p == 1) return at;
  if (std::string problem = first_problem(layout.problems(model)); !problem.empty())
    throw std::invalid_argument(problem);
  if (world % (tensor_parallel * p) != 0 || stage < 0 || stage >= p) {
    throw std::invalid_argument("t x p = " + std::to_string(tensor_parallel * p) + " does not divide the " +
                                std::to_string(world) + " ranks, or stage " + std::to_string(stage) +
                                " is not one of " + std::to_string(p));
  }
  const int v = layout.virtual_stages(model);
  if (std::string problem = pipeline_schedule_problem(p, v, micro_batches); !problem.empty())
    throw std::invalid_argument(problem);
  const comm::Topology topology{world, 0, ranks_per_node, false};
  at.data_parallel_nodes = ZeroEngine::data_parallel_topology(topology, tensor_parallel, 0, p).num_nodes();
  at.chunks = stage_chunks(model, layout, stage);
  const std::vector<PipelineOp> schedule = pipeline_schedule(p, stage, v, micro_batches);
  for (int c = 0; c < v; ++c) at.in_flight.push_back(max_in_flight(schedule, c));
  return at;
}

comm::TrafficCounts pipeline_p2p_traffic(const GPTConfig& model, const PipelineLayout& pipeline, int nodes,
                                         int ranks_per_node, int tensor_parallel, bool sequence_parallel,
                                         int micro_batch, int accumulation_steps, int element_bytes) {
  comm::TrafficCounts traffic;
  const int p = pipeline.stages, v = pipeline.virtual_stages(model), t = tensor_parallel;
  const int stage_ranks = nodes * ranks_per_node / p;
  // Forward and back, every micro-batch, from each rank of the sending stage: 1/t of [B, T, C] (the
  // scatter-gather, or sequence parallelism's own part) at t > 1.
  const uint64_t tensor =
      uint64_t(micro_batch) * uint64_t(model.seq_len) * uint64_t(model.hidden) * uint64_t(element_bytes);
  const uint64_t boundary = 2 * uint64_t(accumulation_steps) * uint64_t(stage_ranks) * tensor / uint64_t(t);
  // The scatter-gather's all-gather: each receiving rank sends its part to the t - 1 others in its node.
  const uint64_t gathered = scatter_gathers(t, sequence_parallel) ? boundary * uint64_t(t - 1) : 0;
  for (int g = 0; g + 1 < p * v; ++g) {  // the boundary after model chunk g, from stage g % p to (g + 1) % p
    const bool intra = node_of_stage(g % p, stage_ranks, ranks_per_node) ==
                       node_of_stage((g + 1) % p, stage_ranks, ranks_per_node);
    traffic.bytes[int(comm::Phase::kPpP2p)][intra ? 0 : 1] += boundary;
    traffic.bytes[int(comm::Phase::kPpP2p)][0] += gathered;
  }
  return traffic;
}

comm::TrafficCounts plan_step_traffic(const GPTConfig& model, const ZeroConfig& zero, int nodes,
                                      int ranks_per_node, int accumulation_steps, int tensor_parallel,
                                      const PipelineLayout& pipeline) {
  if (pipeline.stages == 1)
    return stage_zero_traffic(model, zero, nodes, ranks_per_node, accumulation_steps, tensor_parallel,
                              pipeline, 0);
  comm::TrafficCounts all;
  for (int s = 0; s < pipeline.stages; ++s)
    all += stage_zero_traffic(model, zero, nodes, ranks_per_node, accumulation_steps, tensor_parallel,
                              pipeline, s);
  add_tied_embedding(model, zero, nodes, ranks_per_node, tensor_parallel, pipeline, all);
  return all;
}

void plan_pipeline_variant(Plan& plan, PlanVariant& v) {
  const PlanOptions& c = plan.cluster;
  const int p = plan.pipeline.stages;
  const int element_bytes = int(dtype_size(v.zero.precision));
  const comm::TrafficCounts p2p =
      pipeline_p2p_traffic(plan.model, plan.pipeline, c.nodes, c.gpus_per_node, plan.tensor_parallel,
                           plan.sequence_parallel, plan.micro_batch, plan.accumulation_steps, element_bytes);
  v.traffic = plan_step_traffic(plan.model, v.zero, c.nodes, c.gpus_per_node, plan.accumulation_steps,
                                plan.tensor_parallel, plan.pipeline);
  v.traffic += p2p;
  const double message = message_seconds(plan, p2p, element_bytes);
  std::vector<StageCost> costs;
  std::vector<PlanStage> rows;
  for (int s = 0; s < p; ++s) {
    // A middle stage whose memory is not planned holds stage 1's chunks: its NVMe traffic is stage 1's.
    costs.push_back(stage_cost(plan, v, s, memory_planned(plan, v, s) ? nullptr : &costs[1].memory));
    rows.push_back(stage_row(plan, s, costs.back(), message));
    const bool busier = costs.back().memory.tiers.device > costs[size_t(v.busiest_stage)].memory.tiers.device;
    if (memory_planned(plan, v, s) && (s == 0 || busier)) v.busiest_stage = s;
  }
  v.memory = costs[size_t(v.busiest_stage)].memory;
  const Partition first = stage_partition(plan, v.zero, 0);
  const double tied_bytes = double(first.unit(ParamTable::kWte).shard) * 4;
  v.timing = pipeline_timing(plan, costs, rows, message, tied_bytes);
  if (v.configured) plan.stages = rows;
}

}  // namespace gpt
