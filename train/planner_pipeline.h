// What the planner's two halves share (internal to //train:planner): the step-time model of planner.cc, which
// planner_pipeline.cc applies to each pipeline stage, and where a stage sits and what it keeps in flight,
// which plan_memory (planner.cc) asks planner_pipeline.cc.
#pragma once

#include <vector>

#include "model/pipeline.h"
#include "train/planner.h"

namespace gpt {

// The training FLOPs per token a rank's compute counts: the model's 6N + 12 L C T (or a pipeline stage's
// chunks' share of it), and what recomputation adds.
struct PlanWork {
  double flops_per_token = 0, recompute_flops_per_token = 0;
};

// The step time of one rank that runs `work` for every token of the plan's micro-batches, with v's bytes
// over plan.world ranks on plan.cluster.nodes nodes (planner.cc; the model is printed by the report).
PlanTiming predict_time(const Plan& plan, const PlanVariant& v, const PlanWork& work);

// Where a pipeline stage's ranks sit and what the stage runs (p > 1; at p = 1 nothing is set).
struct StagePlacement {
  std::vector<PipelineChunk> chunks;  // the stage's, in the order it holds them
  std::vector<int> in_flight;         // per chunk: the micro-batches it keeps at once (max_in_flight)
  int data_parallel_nodes = 1;        // the nodes its data-parallel group spans (1: several stages a node)
};
// Throws std::invalid_argument when the layout does not split the model, t p does not divide the world or
// m micro-batches cannot be scheduled, and comm::TopologyError when a stage neither fills whole nodes nor
// fits in one (ZeroEngine::data_parallel_topology).
StagePlacement stage_placement(const GPTConfig& model, const PipelineLayout& layout, int stage, int nodes,
                               int ranks_per_node, int tensor_parallel, int micro_batches);

// A variant at p > 1: its memory (the busiest stage's), bytes (every stage's ZeRO phases, the tied wte's
// sum, pp_p2p) and step time (the pipeline's timeline); for the configured variant also plan.stages.
void plan_pipeline_variant(Plan& plan, PlanVariant& v);

}  // namespace gpt
