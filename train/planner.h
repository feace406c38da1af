// gpt_train --plan: what a configuration would cost on a GPU cluster, computed without MPI and without
// allocating any model memory. Per-GPU memory by state class, the bytes of one optimizer step by phase and
// link class for ZeRO-3 and every ZeRO++ combination (from zero/traffic_model.h, the closed forms the traffic
// meter is tested against), and a predicted step time from a simple stated model of compute and links.
// With ZeRO-Infinity's offload: memory per tier (device, CPU, NVMe), the bytes each rank reads from and
// writes to its NVMe swap files per step, and their time at stated disk bandwidths. The same memory formulas,
// counted for the CPU backend (MemoryTarget::kCpu), are what gpt_train's memory guard checks before it
// allocates.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/traffic.h"
#include "model/config.h"
#include "train/options.h"
#include "zero/config.h"

namespace gpt {

// Which backend a memory count is for.
enum class MemoryTarget {
  // The planner's GPU: activations and gathered units in the compute dtype; wire memory (pinned host memory
  // on a GPU) is not counted.
  kGpu,
  // The CPU backend as gpt_train runs it (device and wire memory are both RAM): fp32 activations, gathered
  // units widened to fp32, the widened replica of stages 0-2, the transient buffers of each stage's
  // reduction, the MPI ring's staging buffers (comm/mpi_collectives.cc) and the engine's start-up copy.
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
  double total = 0;                     // in memory: the device and cpu tiers
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
  PlanMemory memory;
  PlanTiming timing;
};

struct Plan {
  GPTConfig model;
  PlanOptions cluster;
  int world = 1;
  int micro_batch = 1, accumulation_steps = 1;
  int64_t global_batch = 1;
  int64_t params = 0;            // every parameter, the position table included
  int64_t params_for_flops = 0;  // N of 6N: without the position table (GPTConfig::params_without_positions)
  int64_t padded_params = 0;     // P: each gather unit padded to a multiple of 8W
  double flops_per_token = 0;    // 6N + 12 L C T, plus the recomputation's (recompute_flops_per_token)
  std::vector<PlanVariant> variants;
  int configured = 0;  // index into variants
  std::vector<std::string> notes;
};

// The closed-form bytes of one optimizer step on nodes x ranks_per_node ranks, all ranks together, exactly as
// the report uses them (the same call the MPI test compares with the meter).
comm::TrafficCounts plan_step_traffic(const GPTConfig& model, const ZeroConfig& zero, int nodes,
                                      int ranks_per_node, int accumulation_steps);

// Activation elements of one micro-batch of B sequences, counted from the engine's buffers (model/layers.h,
// loop.h): the kept block inputs, the blocks' saved activations (as recompute keeps them), the backward
// scratch, the head and the residual gradient.
int64_t activation_elements(const GPTConfig& model, int micro_batch, const Recompute& recompute);
// The FLOPs per token recomputation adds: selective, the attention core's 4 C T per layer; full, the
// recomputed blocks' forwards, 24 C^2 + 4 C T each.
double recompute_flops_per_token(const GPTConfig& model, const Recompute& recompute);

// The memory one rank would hold for this configuration on nodes x ranks_per_node ranks (the assumptions
// are printed by plan_report and listed in planner.cc), and its NVMe traffic per step of
// accumulation_steps micro-steps.
PlanMemory plan_memory(const GPTConfig& model, const ZeroConfig& zero, int nodes, int ranks_per_node,
                       int micro_batch, int accumulation_steps = 1, MemoryTarget target = MemoryTarget::kGpu);

// Everything the report prints. Throws UsageError when the cluster or batch cannot be planned.
Plan make_plan(const TrainOptions& options);

// The human report, ending with one JSON line {"plan": {...}} that carries the same numbers.
std::string plan_report(const TrainOptions& options);
std::string plan_json(const Plan& plan);

}  // namespace gpt
