// The memory guard; see memory_guard.h.
#include "train/memory_guard.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "base/user_error.h"
#include "model/params.h"
#include "tensor/kept_block_source.h"
#include "zero/partition.h"

namespace gpt {
namespace {

// The number in kB on the line of /proc/<file> that starts with key ("VmHWM:"), in bytes; 0 when absent.
double proc_kib_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) * 1024.0;
  }
  return 0;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, bytes >= 1e9 ? "%.1f GiB" : "%.2f GiB", bytes / double(1 << 30));
  return text;
}

// The host memory a checkpoint or model file passes through: the engine streams master, m and v through a
// buffer of min(P/W, sub_group_size) elements each (ZeroEngine::read_state and write_state; through the swap
// buffers when the optimizer is on NVMe), and --init-from reads the whole model in fp32 first.
double checkpoint_copy_bytes(const TrainOptions& o, int world) {
  if (o.save.empty() && o.load.empty() && o.init_from.empty()) return 0;
  const ParamTable table = make_param_table(o.model, o.zero.tile_factor);
  const Partition p(table, world, o.zero.stage == 0 ? 1 : world);
  double bytes = o.zero.offload.optimizer_on_nvme()
                     ? 0
                     : 12.0 * double(std::min(p.shard_total(), o.zero.offload.sub_group_size));
  if (!o.init_from.empty()) bytes += 4.0 * double(table.total);
  return bytes;
}

// What an alternative configuration would need, or infinity when the engine would refuse it: its buffers are
// counted by a dry run of the engine (zero/dry_run.h), which cannot count what cannot be built, and the guard
// never suggests it.
// At p > 1, for a rank of `stage`; a world whose stages do not fit its nodes is refused like a setting
// (comm::TopologyError).
double alternative_need(const TrainOptions& o, int nodes, int ranks_per_node, double baseline, int stage) {
  try {
    return rank_memory_need(o, nodes, ranks_per_node, baseline, stage).total;
  } catch (const std::invalid_argument&) {
    return std::numeric_limits<double>::infinity();
  } catch (const UsageError&) {
    return std::numeric_limits<double>::infinity();
  }
}

// The pipeline stage of world rank `rank` (ranks ordered tensor, data, pipeline: a stage is t x d
// consecutive ranks).
int stage_of_rank(const TrainOptions& o, int rank, int world_size) {
  return rank / std::max(world_size / o.pipeline.stages, 1);
}

// A configuration to try instead of the given one, named as the user would set it.
struct Alternative {
  std::string name;
  TrainOptions options;
  int nodes_factor = 1;  // more ranks: machines like this one
};

}  // namespace

double MemoryNeed::of(const std::string& state) const {
  for (const PlanMemoryLine& line : lines) {
    if (line.state == state) return line.bytes;
  }
  return 0;
}

MemoryNeed rank_memory_need(const TrainOptions& o, int nodes, int ranks_per_node, double baseline_bytes,
                            int stage) {
  const bool cpu = o.device == "cpu";
  const PlanMemory m =
      plan_memory(o.model, o.zero, nodes, ranks_per_node, o.micro_batch, o.accumulation_steps,
                  cpu ? MemoryTarget::kCpu : MemoryTarget::kGpu, o.tensor_parallel, o.pipeline, stage);
  MemoryNeed need;
  double in_blocks = 0;  // what the host arenas' blocks hold at the peak
  for (const PlanMemoryLine& line : m.states) {
    // On a GPU only the cpu tier (pinned buffers, host-offloaded state) is RAM.
    if (line.tier == "nvme" || (!cpu && line.tier != "cpu")) continue;
    need.lines.push_back(line);
    if (!line.outside_arenas) in_blocks += line.bytes;
  }
  if (in_blocks > 0) {
    need.lines.push_back({"kept host blocks", KeptBlockSource::kSlack * in_blocks,
                          "blocks freed and kept for reuse, at most " +
                              std::to_string(int(KeptBlockSource::kSlack * 100 + 0.5)) +
                              "% above the peak in use"});
  }
  if (const double copy = checkpoint_copy_bytes(o, nodes * ranks_per_node); copy > 0) {
    need.lines.push_back(
        {"checkpoint copy", copy, "the host buffer checkpoints and model files pass through"});
  }
  need.lines.push_back({"process baseline", baseline_bytes, "measured: binary, MPI, data loader"});
  for (const PlanMemoryLine& line : need.lines) need.total += line.bytes;
  return need;
}

double mem_available_bytes() {
  return proc_kib_field("/proc/meminfo", "MemAvailable:");
}

double rss_bytes() {
  return proc_kib_field("/proc/self/status", "VmRSS:");
}

double peak_rss_bytes() {
  return proc_kib_field("/proc/self/status", "VmHWM:");
}

uint64_t machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : id) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

namespace {

// The smallest world of whole machines (ranks_per_node ranks each) at which need fits the budget, searched
// by doubling and then bisection; 0 when even 2^16 machines would not do.
int machines_that_fit(const TrainOptions& o, int nodes, int ranks_per_node, double baseline, double budget,
                      int stage) {
  auto fits = [&](int n) { return alternative_need(o, n, ranks_per_node, baseline, stage) <= budget; };
  int high = nodes * 2;
  while (high <= (1 << 16) && !fits(high)) high *= 2;
  if (high > (1 << 16)) return 0;
  int low = std::max(nodes, high / 2);  // does not fit (or is the given world)
  while (high - low > 1) {
    const int mid = low + (high - low) / 2;
    (fits(mid) ? high : low) = mid;
  }
  return high;
}

std::vector<Alternative> alternatives(const TrainOptions& o) {
  std::vector<Alternative> list;
  for (int stage = o.zero.stage + 1; stage <= 3; ++stage) {
    Alternative a{"--zero-stage " + std::to_string(stage), o};
    a.options.zero.stage = stage;
    list.push_back(a);
  }
  if (!o.zero.offload.optimizer_on_nvme()) {
    Alternative a{"offload_optimizer nvme at stage 3", o};
    a.options.zero.stage = 3;
    a.options.zero.offload.optimizer = OffloadDevice::kNvme;
    list.push_back(a);
  }
  if (!o.zero.offload.param_on_nvme()) {
    Alternative a{"offload_optimizer and offload_param nvme at stage 3", o};
    a.options.zero.stage = 3;
    a.options.zero.offload.optimizer = a.options.zero.offload.param = OffloadDevice::kNvme;
    list.push_back(a);
  }
  if (o.zero.recompute.granularity == RecomputeGranularity::kNone) {
    Alternative a{"--recompute-activations", o};
    a.options.zero.recompute = Recompute::selective();
    list.push_back(a);
  }
  if (!o.zero.recompute.is_full()) {
    Alternative a{"--checkpoint-activations", o};
    a.options.zero.recompute = Recompute::full();
    list.push_back(a);
  }
  return list;
}

// The tile factors the guard suggests, above the one given, that tile this model (model/params.h).
std::vector<int> tile_factors_to_try(const TrainOptions& o) {
  std::vector<int> factors;
  for (int n : {2, 4, 8}) {
    if (n > o.zero.tile_factor && tile_factor_problem(o.model, n).empty()) factors.push_back(n);
  }
  return factors;
}

// Memory-centric tiling at stage 3 (the stage where the gathered units are what it shrinks): the smallest
// factor that fits, named with the stage when the given one is lower; nothing when stage 3 fits untiled
// (that alternative is named already) or no factor does.
void add_tiling_that_fits(const TrainOptions& o, int nodes, int ranks_per_node, double baseline,
                          double budget, int stage, std::vector<std::string>& fitting) {
  TrainOptions at_stage3 = o;
  at_stage3.zero.stage = 3;
  if (alternative_need(at_stage3, nodes, ranks_per_node, baseline, stage) <= budget) return;
  for (int n : tile_factors_to_try(o)) {
    TrainOptions tiled = at_stage3;
    tiled.zero.tile_factor = n;
    const double need = alternative_need(tiled, nodes, ranks_per_node, baseline, stage);
    if (need > budget) continue;
    fitting.push_back(std::string(o.zero.stage < 3 ? "--zero-stage 3 " : "") + "--tile-factor " +
                      std::to_string(n) + " (" + gib(need) + ")");
    return;
  }
}

// "would fit: ..." for the worst rank: each alternative alone; tiling; more ranks (at stage 3 when the stage
// is 0, where more ranks share nothing); and when none of these does, all of them together, on more ranks if
// need be.
std::string what_would_fit(const TrainOptions& o, int nodes, int ranks_per_node, double baseline,
                           double budget, int stage) {
  std::vector<std::string> fitting;
  for (const Alternative& a : alternatives(o)) {
    const double need = alternative_need(a.options, nodes, ranks_per_node, baseline, stage);
    if (need <= budget) fitting.push_back(a.name + " (" + gib(need) + ")");
  }
  add_tiling_that_fits(o, nodes, ranks_per_node, baseline, budget, stage, fitting);
  auto on_more_ranks = [&](const TrainOptions& config, const std::string& prefix) {
    const int n = machines_that_fit(config, nodes, ranks_per_node, baseline, budget, stage);
    if (n > 0) {
      fitting.push_back(prefix + std::to_string(n * ranks_per_node) + " ranks (" + std::to_string(n) +
                        (n == 1 ? " machine" : " machines") + " like this one)");
    }
  };
  TrainOptions sharded = o;
  sharded.zero.stage = o.zero.stage == 0 ? 3 : o.zero.stage;
  on_more_ranks(sharded, o.zero.stage == 0 ? "--zero-stage 3 on " : "");
  TrainOptions all = o;
  all.zero.stage = 3;
  all.zero.offload.optimizer = all.zero.offload.param = OffloadDevice::kNvme;
  all.zero.recompute = Recompute::full();
  const std::vector<int> factors = tile_factors_to_try(o);
  if (!factors.empty()) all.zero.tile_factor = factors.back();
  const std::string all_name =
      factors.empty() ? "stage 3 with offload_optimizer and offload_param nvme and --checkpoint-activations"
                      : "stage 3 with offload_optimizer and offload_param nvme, --checkpoint-activations and "
                        "--tile-factor " +
                            std::to_string(all.zero.tile_factor);
  const double all_need = alternative_need(all, nodes, ranks_per_node, baseline, stage);
  if (fitting.empty() && all_need <= budget) fitting.push_back(all_name + " (" + gib(all_need) + ")");
  if (fitting.empty()) on_more_ranks(all, all_name + " on ");
  std::string text;
  for (size_t i = 0; i < fitting.size(); ++i) text += (i ? ", or " : "") + fitting[i];
  if (text.empty()) {
    return "none of more ranks, a higher stage, NVMe offload, activation checkpointing or tiling would fit "
           "(all of them: " +
           gib(all_need) + "); use a smaller model or micro-batch, or a machine with more memory";
  }
  return "would fit: " + text;
}

}  // namespace

MemoryVerdict judge_memory(const TrainOptions& o, const std::vector<RankMemory>& ranks, int rank, int nodes,
                           int ranks_per_node, double memory_limit) {
  auto verdict_of = [&](int r) {
    MemoryVerdict v;
    v.need = ranks[r].need;
    double min_available = ranks[r].available, in_use = 0;
    v.ranks_on_machine = 0;
    for (const RankMemory& other : ranks) {
      if (other.machine != ranks[r].machine) continue;
      ++v.ranks_on_machine;
      min_available = std::min(min_available, other.available);
      in_use += other.rss;
    }
    // Without a limit: what is free now plus what these ranks hold already (their baselines, counted in
    // their needs).
    v.source = memory_limit > 0 ? "--memory-limit" : "MemAvailable";
    v.machine_memory = memory_limit > 0 ? memory_limit : min_available + in_use;
    v.budget = v.machine_memory / v.ranks_on_machine;
    if (memory_limit <= 0 && min_available <= 0) v.budget = v.machine_memory = 1e300;  // no /proc/meminfo

    return v;
  };
  MemoryVerdict mine = verdict_of(rank);
  mine.baseline = ranks[rank].rss;
  int worst = -1;
  double worst_over = 0;
  for (int r = 0; r < int(ranks.size()); ++r) {
    const MemoryVerdict v = verdict_of(r);
    if (v.need - v.budget > worst_over) worst = r, worst_over = v.need - v.budget;
  }
  if (worst < 0) return mine;
  const MemoryVerdict w = verdict_of(worst);
  const int stage = stage_of_rank(o, worst, nodes * ranks_per_node);
  const MemoryNeed need = rank_memory_need(o, nodes, ranks_per_node, ranks[worst].rss, stage);
  std::ostringstream line;
  line << "memory: rank " << worst
       << (o.pipeline.stages > 1 ? " (pipeline stage " + std::to_string(stage) + ")" : std::string())
       << " needs " << gib(w.need) << " at its peak (model states and buffers "
       << gib(need.total - need.of("activations") - need.of("process baseline")) << ", activations "
       << gib(need.of("activations")) << ", process " << gib(need.of("process baseline")) << ") but may use "
       << gib(w.budget) << " (" << w.source << " " << gib(w.machine_memory) << " shared by "
       << w.ranks_on_machine << (w.ranks_on_machine == 1 ? " rank" : " ranks") << " on its machine); "
       << what_would_fit(o, nodes, ranks_per_node, ranks[worst].rss, w.budget, stage)
       << "; gpt_train --plan prints the table";
  mine.problem = line.str();
  return mine;
}

MemoryVerdict check_memory(const TrainOptions& o, comm::Communicator& world) {
  const comm::Topology& t = world.topology();
  RankMemory me;
  me.machine = machine_id();
  me.rss = rss_bytes();
  me.available = mem_available_bytes();
  me.need = rank_memory_need(o, t.num_nodes(), t.ranks_per_node, me.rss,
                             stage_of_rank(o, world.rank(), world.size()))
                .total;
  std::vector<RankMemory> all(world.size());
  world.all_gather(&me, all.data(), sizeof me, comm::Phase::kOther).wait();
  MemoryVerdict verdict =
      judge_memory(o, all, world.rank(), t.num_nodes(), t.ranks_per_node, o.memory_limit_bytes);
  if (!verdict.problem.empty()) throw UsageError(verdict.problem);
  return verdict;
}

}  // namespace gpt
