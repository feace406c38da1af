// gpt_train's memory guard: before the engine allocates anything, what each rank will hold in RAM at its peak
// (the planner's formulas counted for the CPU backend, plan_memory with MemoryTarget::kCpu, plus the host
// copies that checkpoints make and the process's own baseline, measured) against the memory it may use. That
// is MemAvailable from /proc/meminfo, or --memory-limit, divided among the ranks that share the machine:
// ranks whose /proc/sys/kernel/random/boot_id hash is the same run on one kernel and so share one RAM, as
// local ranks and the emulated nodes of scripts/cluster do. A run that would not fit stops on every rank with
// one line: what the worst rank needs, what it has, and which of more ranks, a higher stage, NVMe offload,
// activation checkpointing or memory-centric tiling (--tile-factor 2, 4 or 8 at stage 3) would fit, each
// counted with the same formulas; a std::bad_alloc halfway through the allocations is what this replaces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/options.h"
#include "train/planner.h"

namespace gpt {

// What one rank holds in RAM at its peak: plan_memory's lines that live in memory, then "checkpoint copy"
// (when the run saves or loads) and "process baseline" (the binary, MPI, the data loader: measured).
struct MemoryNeed {
  std::vector<PlanMemoryLine> lines;
  double total = 0;
  double of(const std::string& state) const;  // bytes of a line, 0 when absent
};

// For a world of nodes x ranks_per_node ranks on the backend o.device ("cpu": every tier but nvme is RAM;
// a GPU: only the "cpu" tier is RAM, device memory is the backend's to check). With pipeline stages
// (o.pipeline.stages > 1) for a rank of stage `stage`: its chunks' states, buffers and activation sets.
MemoryNeed rank_memory_need(const TrainOptions& o, int nodes, int ranks_per_node, double baseline_bytes,
                            int stage = 0);

// Readers of /proc: MemAvailable, this process's VmRSS and VmHWM (bytes; 0 when unreadable), and a hash of
// the kernel's boot id (the same for every process on one machine).
double mem_available_bytes();
double rss_bytes();
double peak_rss_bytes();
uint64_t machine_id();

// What each rank reports to the others.
struct RankMemory {
  uint64_t machine = 0;  // machine_id()
  double need = 0;       // rank_memory_need(...).total
  double available = 0;  // MemAvailable when it looked
  double rss = 0;        // VmRSS when it looked: already in use, and part of need
};

struct MemoryVerdict {
  double need = 0;            // this rank's
  double baseline = 0;        // this rank's VmRSS before the engine (measured)
  double budget = 0;          // this rank's share of its machine
  int ranks_on_machine = 1;   // ranks sharing this rank's machine
  double machine_memory = 0;  // what they share: --memory-limit, or MemAvailable plus what they use now
  std::string source;         // "--memory-limit" or "MemAvailable"
  std::string problem;        // empty when every rank fits; else the one line (the same on every rank)
};

// Decides from every rank's numbers, so every rank reaches the same verdict. memory_limit: the machine's
// memory to use (0: MemAvailable plus what the machine's ranks hold already).
MemoryVerdict judge_memory(const TrainOptions& o, const std::vector<RankMemory>& ranks, int rank, int nodes,
                           int ranks_per_node, double memory_limit);

// The guard itself, collective over world (host memory, e.g. the MPI world): measures the baseline, gathers
// every rank's numbers and throws UsageError on every rank when any rank would not fit.
MemoryVerdict check_memory(const TrainOptions& o, comm::Communicator& world);

}  // namespace gpt
