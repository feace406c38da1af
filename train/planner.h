// gpt_train --plan: what a configuration would cost on a GPU cluster, computed without MPI and without
// allocating any model memory. Per-GPU memory by state class, the bytes of one optimizer step by phase and
// link class for ZeRO-3 and every ZeRO++ combination (from zero/traffic_model.h, the closed forms the traffic
// meter is tested against), and a predicted step time from a simple stated model of compute and links.
// With ZeRO-Infinity's offload: memory per tier (device, CPU, NVMe), the bytes each rank reads from and
// writes to its NVMe swap files per step, and their time at stated disk bandwidths. Buffers are not restated
// here: they are what the engine's own arenas hold in a dry run of the configuration (zero/dry_run.h). The
// same count for the CPU backend (MemoryTarget::kCpu) is what gpt_train's memory guard checks before it
// allocates.
//
// Tensor parallelism (Megatron, t > 1): the world is t x d. Model states are those of one rank's
// tensor-parallel slice partitioned over its d data-parallel ranks; ZeRO's bytes are one data-parallel
// group's (L/t ranks per node) times the t groups; the tensor-parallel collectives' bytes
// (zero/tensor_parallel_traffic.h) are all intra-node; activations per rank are counted twice, as our layer
// loop allocates them and by the paper's formulas (train/activation_formulas.h). A sweep over t = 1, 2, 4, 8
// (with and without sequence parallelism) shows the trade on the same cluster.
//
// Pipeline parallelism (p > 1, train/planner_pipeline.cc): the world is t x d x p (Megatron's rank order:
// tensor, data, pipeline). Each stage's model states are its own chunks' (stage_param_table) partitioned over
// its d data-parallel ranks; its activations are one micro-batch's through its layers times the micro-batches
// its schedule keeps in flight (max_in_flight: p - s for stage s of 1F1B); memory is reported for the stage
// that needs the most. Bytes add the pipeline's point-to-point messages (pp_p2p) and the tied wte's gradient
// sum between the first and the last stage (grad_reduce, as the engine meters it). The step is the 1F1B or
// interleaved timeline of the slowest stage's ops (simulate_pipeline) plus what a stage cannot overlap.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/traffic.h"
#include "model/config.h"
#include "model/pipeline.h"
#include "train/options.h"
#include "zero/config.h"

namespace gpt {

// Which backend a memory count is for.
enum class MemoryTarget {
  // The planner's GPU: activations in the compute dtype; the engine's buffers (device and wire memory
  // together: NCCL's wire memory is device memory) as its dry run holds them.
  kGpu,
  // The CPU backend as gpt_train runs it (device and wire memory are both RAM): fp32 activations, the
  // engine's buffers as its dry run holds them, and what lives outside its arenas: the MPI ring's staging
  // buffers (comm/mpi_collectives.cc) and the engine's start-up copy.
  kCpu,
};

// One line of the per-GPU memory table.
struct PlanMemoryLine {
  std::string state;  // "compute weights", "master", ..., "buffers", "activations"
  double bytes = 0;
  std::string formula;  // ZeRO's formula ("4P/W") or how the bytes were counted
  // "device" (GPU memory; RAM on the CPU backend), "cpu" (host memory beside a GPU) or "nvme" (swap files:
  // not in memory, not in total).
  std::string tier = "device";
  bool outside_arenas = false;  // the CPU backend's MPI staging and start-up copy: no arena block holds it
};

// Bytes per rank in each tier. nvme: the swap files' sizes (zero/offload_layout.h).
struct PlanTiers {
  double device = 0, cpu = 0, nvme = 0;
};

// Bytes one rank reads from and writes to its NVMe swap files in one optimizer step: the optimizer's
// master, m and v (12P/W) once each way; the compute-weight shard (cP/W) read once per gather pass (forward
// and backward of each micro-step; twice for the tiles a tiled backward gathers twice) and written once after
// the step.
struct PlanOffloadTraffic {
  double nvme_read = 0, nvme_written = 0;
  // Of nvme_read: the compute-weight shards read ahead of the forward's and of the backward's gathers, over
  // the micro-steps; with tiling and activation checkpointing the backward reads the tiles its
  // recomputation gathers a second time.
  double param_read_forward = 0, param_read_backward = 0;
};

struct PlanMemory {
  std::vector<PlanMemoryLine> states;   // in the order printed; the bytes of those in memory sum to total
  std::vector<PlanMemoryLine> buffers;  // what the "buffers" line is made of
  double activations_full = 0;          // one micro-batch without activation checkpointing
  double activations_checkpointed = 0;  // with it: block inputs plus one block's activations
  double activations_selective = 0;     // selective recomputation: without the attention probabilities
  double activations = 0;               // the configured recomputation's: the "activations" line
  // The same three (and the configured recomputation's) by the paper's formulas (Korthikanti et al.: 2 bytes
  // per stored activation, 1 per dropout mask; activation_formulas.h, paper_model_bytes), per rank at the
  // plan's t and sequence parallelism. Ours above are what the layer loop allocates on that rank
  // (restated_activations), in the compute dtype on a GPU and fp32 on the CPU backend.
  double activations_paper_full = 0, activations_paper_checkpointed = 0, activations_paper_selective = 0;
  double activations_paper = 0;
  // ZeRO's model states in memory (the device and cpu tiers): compute weights, master, moments, gradients,
  // hpZ secondaries, qgZ's kept errors, swap buffers.
  double model_states = 0;
  double total = 0;  // in memory: the device and cpu tiers
  PlanTiers tiers;
  PlanOffloadTraffic offload;
  double of(const std::string& state) const;  // bytes of a state line, 0 when absent
};

// The predicted time of one optimizer step (seconds).
struct PlanTiming {
  double compute_forward = 0, compute_backward = 0;
  std::array<double, 3> comm{};  // param_gather_fwd, param_gather_bwd, grad_reduce: max over link classes
  std::array<std::array<double, 2>, 3> link{};  // [phase][intra, inter]
  double nvme_read = 0, nvme_write = 0;         // a node's disk shared by its GPUs: all of a step's swap I/O
  // The tensor-parallel collectives of the forward (tp_fwd) and of the backward (tp_bwd with recomputation's
  // repeated ones, plus act_gather), at the intra-node bandwidth; serial with the layers' compute.
  double tensor_forward = 0, tensor_backward = 0;
  // Host work per rank (PlanOptions' host rates; 0 where a rate is not given): the forward's (decoding its
  // gathers, qwZ's own-shard quantization, sending its bytes) and the backward's (decoding, the reduction's
  // sums or qgZ's codecs, sending), on the compute's cores; the optimizer's update, between steps; the
  // collectives' message steps times the link latency.
  double host_forward = 0, host_backward = 0, optimizer = 0, latency = 0;
  // What overlap cannot hide: one unit (the tied embedding's share) of the shorter of each pass's compute
  // and links (compute waits for the first gather; the links for the last unit's compute).
  double exposed = 0;
  // What of the forward's exposed first gather crosses during the optimizer instead: gpt_train's steps follow
  // each other, and stage 3 with overlap_comm posts that gather once the first unit's share of the update is
  // done, so the rest of the update, (1 - its share) x optimizer, hides as much of it.
  double ahead = 0;
  // The two passes as the step adds them: max(forward work, its gathers, its NVMe reads) and the backward's.
  double forward_pass = 0, backward_pass = 0;
  // Pipeline stages (p > 1): the simulated timeline of the step's micro-batches (its bubble included) at
  // the slowest stage's forward and backward op (each with its message to the next stage); the bubble's
  // share of it; a message's time; the tied wte's gradient sum between the first and the last stage.
  double pipeline = 0, bubble = 0, p2p = 0, tied_embedding = 0;
  double forward_op = 0, backward_op = 0;  // the slowest stage's, per chunk and micro-batch
  double step = 0;
  double tokens_per_s = 0;
};

// ZeRO-3 with one combination of qwZ, hpZ and qgZ (or the configured stage when it is below 3).
struct PlanVariant {
  std::string name;  // "zero3", "qwz", "hpz", "qgz", "qwz+hpz", "qwz+qgz", "hpz+qgz", "zeropp" or "stage N"
  ZeroConfig zero;
  bool configured = false;
  std::string problem;          // why this combination cannot run on the cluster as given; empty when it can
  comm::TrafficCounts traffic;  // all ranks together, one optimizer step
  PlanMemory memory;            // p > 1: the busiest stage's
  int busiest_stage = 0;
  PlanTiming timing;
};

// One pipeline stage of the configured variant (p > 1).
struct PlanStage {
  int stage = 0;
  std::string split;                       // "embedding + layers 0-19", "layers 20-39 + head", chunks by ", "
  int layers = 0;                          // transformer layers it runs
  double flops_share = 0;                  // of the model's 6N + 12 L C T (chunk_flops_per_token)
  std::vector<int> in_flight;              // micro-batches it keeps at once, per chunk (max_in_flight)
  double model_states = 0;                 // per rank: its chunks' states over d
  double activations = 0;                  // per rank: in flight x one micro-batch through its layers
  double memory = 0;                       // the device tier per rank
  double forward_op = 0, backward_op = 0;  // seconds per chunk op, its message included
};

// One row of the tensor-parallel sweep: the configured ZeRO combination at tensor-parallel size t (hpZ's h
// capped at the data-parallel ranks per node where the configured h does not divide them).
struct PlanTensorRow {
  int t = 1, d = 1;
  bool sequence_parallel = false;
  int64_t global_batch = 0;      // sequences per step: micro-batch x accumulation x d (as configured)
  int hpz = 1;                   // the hpZ partition size used (1: off)
  std::string problem;           // why this t cannot be planned (nothing else is set), or why ZeRO cannot run
  double model_states = 0;       // per rank
  double activations = 0;        // per rank, ours (the layer loop's), at the configured recomputation
  double activations_paper = 0;  // per rank, the paper's formula
  double memory = 0;             // the device tier per rank
  bool fits = false;
  uint64_t tensor_bytes = 0;  // tp_fwd + tp_bwd + act_gather, all ranks, one step (all intra-node)
  uint64_t zero_intra = 0, zero_inter = 0;  // ZeRO's phases, all ranks, one step
  double step = 0, tokens_per_s = 0;
};

struct Plan {
  GPTConfig model;
  PlanOptions cluster;
  int world = 1;
  int tensor_parallel = 1;  // t: ranks of a tensor-parallel group, consecutive, inside one node
  int data_parallel = 1;    // d = world / (t p): the ranks ZeRO partitions over
  // Pipeline stages: p = pipeline.stages, v chunks each (interleaved; 1 for 1F1B), m = accumulation steps
  // micro-batches per step; the configured variant's stages; the bubble (p - 1)/(v m + p - 1).
  PipelineLayout pipeline;
  int virtual_stages = 1;
  std::vector<PlanStage> stages;  // empty at p = 1
  double bubble_formula = 0;
  bool sequence_parallel = false;
  bool distribute_saved_activations = false;
  // The tensor-parallel collectives of one optimizer step, all ranks (expected_tensor_parallel_traffic):
  // tp_fwd, tp_bwd and act_gather, intra-node; zero at t = 1.
  comm::TrafficCounts tensor_traffic;
  // Their time at the intra-node bandwidth (each GPU sends its share over its own link): the forward's
  // (tp_fwd) and the backward's (tp_bwd and act_gather). Every variant's PlanTiming carries the same.
  double tensor_forward_s = 0, tensor_backward_s = 0;
  std::vector<PlanTensorRow> tensor_sweep;  // t = 1, 2, 4, 8 (SP off and on at t > 1) on this cluster
  int micro_batch = 1, accumulation_steps = 1;
  int64_t global_batch = 1;      // micro-batch x accumulation x d
  int64_t params = 0;            // every parameter, the position table included
  int64_t params_for_flops = 0;  // N of 6N: without the position table (GPTConfig::params_without_positions)
  int64_t padded_params = 0;     // P: each gather unit padded to a multiple of 8W
  int gather_units = 0;          // the units stage 3 gathers one at a time (wte, wpe, blocks, ln_f)
  double first_unit_share = 0;   // unit 0's (the tied embedding's) share of P
  // The share of P in gradient buckets of two or more units (stages 2, 3), which are packed into a send
  // buffer; qgZ reduces a bucket of one unit from the unit's gradient in place (zero/reduce.h).
  double packed_share = 0;
  double flops_per_token = 0;  // 6N + 12 L C T, plus the recomputation's (recompute_flops_per_token)
  std::vector<PlanVariant> variants;
  int configured = 0;  // index into variants
  std::vector<std::string> notes;
};

// The closed-form bytes of one optimizer step on nodes x ranks_per_node ranks, all ranks together, exactly as
// the report uses them (the same call the MPI test compares with the meter). tensor_parallel t > 1: ZeRO's
// phases only, those of one data-parallel group (the slice's partition over d ranks, L/t per node) times t.
// pipeline p > 1: each stage's ZeRO phases (its table over its d ranks, t groups per stage) added, and the
// tied wte's gradient sum between the first and the last stage in grad_reduce (t x d pairs of ranks, an
// all-reduce of its fp32 shard each); pp_p2p is pipeline_p2p_traffic's.
comm::TrafficCounts plan_step_traffic(const GPTConfig& model, const ZeroConfig& zero, int nodes,
                                      int ranks_per_node, int accumulation_steps, int tensor_parallel = 1,
                                      const PipelineLayout& pipeline = {});

// The pipeline's point-to-point bytes of one optimizer step, all ranks (phase pp_p2p): every micro-batch's
// activation forward and its gradient back over each of the p v - 1 chunk boundaries, from each of the t x d
// ranks of a stage, 1/t of [B, T, C] each at t > 1 (Megatron's scatter-gather, or with sequence parallelism
// each rank's own part of the sequence) in element_bytes: 2 (p v - 1) m d B T C x element_bytes (t times
// that at t = 1); a boundary's messages are intra-node when both stages sit on one node. The scatter-gather
// adds its all-gather inside the receiving node, (t - 1) times as much, intra-node.
comm::TrafficCounts pipeline_p2p_traffic(const GPTConfig& model, const PipelineLayout& pipeline, int nodes,
                                         int ranks_per_node, int tensor_parallel, bool sequence_parallel,
                                         int micro_batch, int accumulation_steps, int element_bytes);

// Activation elements of one micro-batch of B sequences, counted from the engine's buffers (model/layers.h,
// loop.h): the kept block inputs, the blocks' saved activations (as recompute keeps them), the backward
// scratch, the head and the residual gradient.
int64_t activation_elements(const GPTConfig& model, int micro_batch, const Recompute& recompute);
// The FLOPs per token recomputation adds: selective, the attention core's 4 C T per layer; full, the
// recomputed blocks' forwards, 24 C^2 + 4 C T each.
double recompute_flops_per_token(const GPTConfig& model, const Recompute& recompute);

// The memory one rank would hold for this configuration on nodes x ranks_per_node ranks (the assumptions
// are printed by plan_report and listed in planner.cc), and its NVMe traffic per step of
// accumulation_steps micro-steps. tensor_parallel t > 1: one rank of a t x d world (its slice partitioned
// over d = nodes x ranks_per_node / t ranks; activations with zero.sequence_parallel as configured).
// pipeline p > 1: one rank of stage `stage` of a t x d x p world: its chunks' states over d = world / (t p),
// the engine's buffers in a dry run of that stage, and activations for the micro-batches it keeps in flight
// (kGpu: a stage's own layers, the head on the last; kCpu: what the engine's layer loops allocate, from the
// dry run). Throws std::invalid_argument when t p does not divide the world or the layout does not split.
PlanMemory plan_memory(const GPTConfig& model, const ZeroConfig& zero, int nodes, int ranks_per_node,
                       int micro_batch, int accumulation_steps = 1, MemoryTarget target = MemoryTarget::kGpu,
                       int tensor_parallel = 1, const PipelineLayout& pipeline = {}, int stage = 0);

// Everything the report prints. Throws UsageError when the cluster, batch or tensor-parallel size cannot be
// planned.
Plan make_plan(const TrainOptions& options);

// The human report, ending with one JSON line {"plan": {...}} that carries the same numbers.
std::string plan_report(const TrainOptions& options);
std::string plan_json(const Plan& plan);

}  // namespace gpt
