// The planner's numbers: memory per GPU, bytes per step and predicted time for each configuration; see
// planner.h. The text and JSON are written in planner_report.cc.
//
// Memory is planned for a GPU backend (MemoryTarget::kGpu), which differs from the CPU backend's arena in two
// places: activations are kept in the compute dtype (2 bytes with fp16/bf16) where the CPU keeps fp32, and a
// gathered unit is used in the compute dtype directly where the CPU widens it to fp32. Everything else is
// what the engine allocates (zero/engine.cc, gather.cc, reduce.cc): fp32 master, Adam moments and gradient
// shards, the compute-weight shard, hpZ secondaries as they arrived on the wire, fp32 unit and wte
// gradients, and the gradient buckets in flight. MemoryTarget::kCpu counts what the CPU backend really holds
// (cpu_buffer_lines below); gpt_train's memory guard and its table after the first step use it.
#include "train/planner.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "base/user_error.h"
#include "kernels/quant/quantize.h"
#include "model/loop.h"
#include "model/params.h"
#include "train/activation_formulas.h"
#include "zero/engine.h"
#include "zero/memory_model.h"
#include "zero/offload_layout.h"
#include "zero/partition.h"
#include "zero/reduce.h"
#include "zero/tensor_parallel_traffic.h"
#include "zero/traffic_model.h"

namespace gpt {
namespace {

struct Combination {
  const char* name;
  bool qwz, hpz, qgz;
};
constexpr Combination kCombinations[] = {
    {"zero3", false, false, false}, {"qwz", true, false, false},    {"hpz", false, true, false},
    {"qgz", false, false, true},    {"qwz+hpz", true, true, false}, {"qwz+qgz", true, false, true},
    {"hpz+qgz", false, true, true}, {"zeropp", true, true, true},
};

Partition make_partition(const ParamTable& table, const ZeroConfig& zero, int world) {
  return Partition(table, world, zero.stage == 0 ? 1 : world);
}

// The `count` largest values of f over the items, added.
template <typename T>
double sum_of_largest(const std::vector<T>& items, size_t count, const std::function<double(const T&)>& f) {
  std::vector<double> values;
  for (const T& item : items) values.push_back(f(item));
  std::sort(values.rbegin(), values.rend());
  double sum = 0;
  for (size_t i = 0; i < std::min(count, values.size()); ++i) sum += values[i];
  return sum;
}

// The order in which the units' gradients become final, which is the order the reducer fills its buckets in
// (model/loop.h): the reverse of the forward, each tile's right after its backward when tiled.
std::vector<int> gradient_order(const Partition& p, const ZeroConfig& z) {
  return loop_schedule(int(p.units().size()), z.tile_factor, z.recompute).gradients;
}

// The engine's buffer pools (zero/gather.cc take_buffer, zero/gradient_sinks.cc buffer_for) keep every buffer
// they allocate and hand out the smallest free one that fits, by its full size; a request that none fits
// allocates another.
// Untiled they settle at the closed forms below (wte, wpe and one or two blocks). Tiled, the requests come in
// many sizes (tiles of 3C, C and 4C rows of C or 4C columns, five small units between them), and a best fit
// can leave buffers that a later, larger tile cannot use: what the pool ends up holding is counted by
// replaying the layer loop's requests (replay_gather_pool, replay_gradient_pool).
class BestFitPool {
 public:
  int take(double bytes) {
    int best = -1;
    for (int i = 0; i < int(sizes_.size()); ++i) {
      if (free_[i] && sizes_[i] >= bytes && (best < 0 || sizes_[i] < sizes_[best])) best = i;
    }
    if (best < 0) {
      sizes_.push_back(bytes);
      free_.push_back(true);
      best = int(sizes_.size()) - 1;
    }
    free_[best] = false;
    return best;
  }
  void give(int buffer) { free_[buffer] = true; }
  double allocated() const { return std::accumulate(sizes_.begin(), sizes_.end(), 0.0); }

 private:
  std::vector<double> sizes_;
  std::vector<bool> free_;
};

// A tiled model's blocks as the loop walks them: each unit's block (-1 outside the blocks) and whether it is
// one of a block's five small units (model/params.h, BlockUnits).
struct TiledBlocks {
  int layers = 0;
  std::vector<int> block_of;
  std::vector<bool> small;
  TiledBlocks(int num_units, int tile_factor)
      : layers((num_units - 3) / BlockUnits::of(0, tile_factor).count()),
        block_of(size_t(num_units), -1),
        small(size_t(num_units), false) {
    for (int l = 0; l < layers; ++l) {
      const BlockUnits b = BlockUnits::of(l, tile_factor);
      for (int u = b.first; u < b.first + b.count(); ++u) block_of[size_t(u)] = l;
      for (int i = 0; tile_factor > 1 && i < BlockUnits::kSmallUnits; ++i) small[size_t(b.small(i))] = true;
    }
  }
};

// For each position of a pass, the position after whose acquisition the loop releases that unit
// (model/loop.cc): before the next acquisition, except wte in the forward (held for the tied head at the
// end), ln_f in the backward (held with wte for the head) and a tiled block's small units (held while the
// block's tiles pass).
std::vector<size_t> release_positions(const std::vector<int>& order, const TiledBlocks& blocks,
                                      bool forward) {
  const size_t n = order.size();
  const int ln_f = int(blocks.block_of.size()) - 1;
  std::vector<size_t> at(n);
  for (size_t i = 0; i < n; ++i) {
    const int u = order[i];
    size_t last = i;
    if (forward && u == ParamTable::kWte) {
      last = n - 1;
    } else if (!forward && u == ln_f) {
      last = std::min(i + 1, n - 1);
    } else if (blocks.small[size_t(u)]) {
      while (last + 1 < n && blocks.block_of[size_t(order[last + 1])] == blocks.block_of[size_t(u)]) ++last;
    }
    at[i] = last;
  }
  return at;
}

// Stage 3's gather pool (the wire's, or the loop's copies'), bytes(u) per gathered unit: the forward and
// backward passes replayed, with overlap_comm's prefetch of the next unit, until the pool stops growing.
double replay_gather_pool(const Partition& p, const ZeroConfig& z, const std::function<double(int)>& bytes) {
  const int U = int(p.units().size());
  const LoopSchedule s = loop_schedule(U, z.tile_factor, z.recompute);
  const TiledBlocks blocks(U, z.tile_factor);
  BestFitPool pool;
  for (int round = 0; round < 8; ++round) {
    const double before = pool.allocated();
    for (const bool forward : {true, false}) {
      const std::vector<int>& order = forward ? s.forward : s.backward;
      const std::vector<size_t> release = release_positions(order, blocks, forward);
      std::vector<std::vector<int>> released_after(order.size());
      for (size_t i = 0; i < order.size(); ++i) released_after[release[i]].push_back(order[i]);
      std::map<int, int> held;  // unit -> its buffer, from posted to released
      auto post = [&](size_t i) {
        if (!held.count(order[i])) held[order[i]] = pool.take(bytes(order[i]));
      };
      for (size_t i = 0; i < order.size(); ++i) {
        post(i);
        if (z.overlap_comm && i + 1 < order.size()) post(i + 1);
        for (int u : released_after[i]) pool.give(held.at(u)), held.erase(u);
      }
    }
    if (round > 0 && pool.allocated() == before) break;
  }
  return pool.allocated();
}

// The unit-gradient pool of stages 2-3 (fp32, numel per unit), over backward passes: each gradient from open
// to ready as the loop walks (model/loop.cc): ln_f's and wte's at the head, wte's open until the embedding;
// a tiled block's small units open for the whole block and one tile at a time, in reverse matrix order.
double replay_gradient_pool(const Partition& p, const ZeroConfig& z) {
  const int U = int(p.units().size()), N = z.tile_factor, ln_f = U - 1;
  const TiledBlocks blocks(U, N);
  std::vector<std::pair<int, bool>> steps;  // (unit, opened: else ready)
  auto open_ready = [&](int u) { steps.push_back({u, true}), steps.push_back({u, false}); };
  steps.push_back({ln_f, true});
  steps.push_back({ParamTable::kWte, true});
  steps.push_back({ln_f, false});
  for (int l = blocks.layers - 1; l >= 0; --l) {
    const BlockUnits b = BlockUnits::of(l, N);
    if (N == 1) {
      open_ready(b.first);
      continue;
    }
    for (int i = 0; i < BlockUnits::kSmallUnits; ++i) steps.push_back({b.small(i), true});
    for (BlockLinear m : {BlockLinear::kFcProj, BlockLinear::kFc, BlockLinear::kAttnProj, BlockLinear::kQkv})
      for (int k = 0; k < N; ++k) open_ready(b.tile(m, k));
    for (int i = BlockUnits::kSmallUnits - 1; i >= 0; --i) steps.push_back({b.small(i), false});
  }
  open_ready(ParamTable::kWpe);
  steps.push_back({ParamTable::kWte, false});
  BestFitPool pool;
  for (int round = 0; round < 8; ++round) {
    const double before = pool.allocated();
    std::map<int, int> open;
    for (const auto& [u, opened] : steps) {
      if (opened) {
        open[u] = pool.take(4.0 * double(p.unit(u).numel));
      } else {
        pool.give(open.at(u));
        open.erase(u);
      }
    }
    if (round > 0 && pool.allocated() == before) break;
  }
  return pool.allocated();
}

// The gradient buckets of stages 2 and 3 as the reducer allocates them: this rank's chunk of each bucket
// (elements), in the order gradients become final.
std::vector<int64_t> bucket_chunks(const Partition& p, const ZeroConfig& z) {
  std::vector<int64_t> chunks;
  for (const std::vector<int>& bucket : plan_buckets(p, gradient_order(p, z), z.reduce_bucket_size)) {
    int64_t chunk = 0;
    for (int u : bucket) chunk += p.unit(u).shard;
    chunks.push_back(chunk);
  }
  return chunks;
}

// Stages 2-3: the pooled fp32 unit gradients besides wte's (which stays open from the head to the
// embedding): untiled the largest other unit's, tiled the pool as the backward's requests leave it.
double other_unit_gradients(const Partition& p, const ZeroConfig& z) {
  const std::vector<UnitPartition>& units = p.units();
  if (z.tile_factor > 1) return replay_gradient_pool(p, z) - 4.0 * double(units[ParamTable::kWte].numel);
  int64_t largest = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    if (int(u) != ParamTable::kWte) largest = std::max(largest, units[u].numel);
  }
  return 4.0 * double(largest);
}

// What the GPU holds beyond the state shards while a micro-step runs (stages 2 and 3).
std::vector<PlanMemoryLine> buffer_lines(const Partition& p, const ZeroConfig& z, int nodes) {
  std::vector<PlanMemoryLine> lines;
  if (z.stage < 2) return lines;  // the full gradient is the "gradients" line; reductions run in place
  const double W = p.world_size(), cb = double(dtype_size(z.precision));
  const std::string dtype = precision_name(z.precision);
  const std::vector<UnitPartition>& units = p.units();
  if (z.stage == 3) {
    // A gathered unit in the compute dtype; with qwZ also the int8 blocks it arrived as. With overlap_comm
    // the next unit is prefetched while this one computes.
    const size_t in_flight = z.overlap_comm ? 2 : 1;
    auto quantized_shard = [&](const UnitPartition& u) {
      return double(quant::quantized_bytes(u.shard, kQuantizedWeightBits, z.weight_block));
    };
    auto slot = [&](const UnitPartition& u) {
      return cb * double(u.padded) + (z.quantized_weights ? quantized_shard(u) * W : 0.0);
    };
    const std::string wire = z.quantized_weights ? " + int8 wire copy" : "";
    if (z.tile_factor > 1) {
      lines.push_back({"gathered units", replay_gather_pool(p, z, [&](int u) { return slot(units[u]); }),
                       "wte, wpe, a tiled block's small units and tiles" +
                           std::string(z.overlap_comm ? " (one computing, one prefetched)" : "") + " in " +
                           dtype + wire + ", as the pool allocates them"});
    } else {
      lines.push_back({"gathered units", sum_of_largest<UnitPartition>(units, in_flight, slot),
                       std::to_string(in_flight) + " x the largest unit in " + dtype + wire +
                           (z.overlap_comm ? " (computing, prefetched)" : "")});
    }
    if (z.quantized_weights) {
      // qwZ quantizes each of this rank's shards once per step and keeps them until the weights change.
      double kept = 0;
      for (const UnitPartition& u : units) kept += quantized_shard(u);
      lines.push_back({"quantized shards", kept, "(1+4/B)P/W, this rank's shards in int8 for qwZ's gathers"});
    }
  }
  lines.push_back({"unit gradient", other_unit_gradients(p, z),
                   z.tile_factor > 1 ? "fp32, pooled: a tiled block's small units and one tile at a time"
                                     : "fp32, the largest unit but wte"});
  lines.push_back({"wte gradient", 4.0 * double(units[ParamTable::kWte].numel),
                   "fp32, open from the head to the embedding"});

  // Buckets: the send buffer of all W chunks in the compute dtype, the fp32 result chunk, and with qgZ the
  // int4 send and receive buffers of its intra-node all-to-all. With overlap_comm two reductions are in
  // flight while the next bucket fills.
  const std::vector<int64_t> chunks = bucket_chunks(p, z);
  const bool qgz = z.quantized_gradients && nodes >= 2;
  const size_t alive = z.overlap_comm ? 3 : 1;
  const double bytes = sum_of_largest<int64_t>(chunks, alive, [&](const int64_t& chunk) {
    double b = W * double(chunk) * cb + 4.0 * double(chunk);
    if (qgz) b += 2 * W * double(quant::quantized_bytes(chunk, z.intra_node_gradient_bits, z.gradient_block));
    return b;
  });
  const std::string qgz_buffers = " + int" + std::to_string(z.intra_node_gradient_bits) + " buffers";
  lines.push_back({"gradient buckets", bytes,
                   std::to_string(alive) + " x the largest bucket in " + dtype + (qgz ? qgz_buffers : "") +
                       (z.overlap_comm ? " (2 reducing, 1 filling)" : "")});
  return lines;
}

// The ring's staging buffers (comm/mpi_collectives.cc): min(W-1, 2) receive and min(W-2, 2) send buffers of
// the largest chunk, allocated outside any arena while a reduce-scatter (or an all-reduce's first half) runs.
double ring_staging_bytes(int world, int64_t chunk_elements, double element_bytes) {
  if (world < 2) return 0;
  const int buffers = std::min(world - 1, 2) + std::min(world - 2, 2);
  return buffers * double(chunk_elements) * element_bytes;
}

// What the CPU backend holds beyond the state shards. persistent: allocated once and kept (the widened
// replica, pooled gather and gradient buffers, the token buffers); transient: the largest set alive at once
// during a step; staging: the MPI ring's buffers, beside the transient ones; startup: the engine
// constructor's host buffer for the initial master, m and v (zero/engine.cc), beside the persistent ones.
struct CpuBuffers {
  std::vector<PlanMemoryLine> parts;
  double persistent = 0, transient = 0, staging = 0, startup = 0;
  void add_persistent(const std::string& name, double bytes, const std::string& formula) {
    if (bytes > 0) parts.push_back({name, bytes, formula});
    persistent += bytes;
  }
};

// Stage 3's pooled gather slots: wte (held across the forward for the tied head), wpe and one block, or two
// with overlap_comm's prefetch; each as it arrives on the wire and widened to fp32. Tiled: wte, wpe, a
// block's five small units (held for the block) and its tiles one (or two) at a time, as the two pools (the
// wire's and the fp32 copies', each with its own best fit) end up allocating them. With qwZ, also this
// rank's shards quantized once per step.
void add_gather_slots(const Partition& p, const ZeroConfig& z, size_t largest_block, CpuBuffers& b) {
  const std::vector<UnitPartition>& units = p.units();
  const double W = p.world_size(), cb = double(dtype_size(z.precision));
  auto wire = [&](const UnitPartition& u) {
    return z.quantized_weights
               ? W * double(quant::quantized_bytes(u.shard, kQuantizedWeightBits, z.weight_block))
               : cb * double(u.padded);
  };
  auto fp32 = [](const UnitPartition& u) { return 4.0 * double(u.padded); };
  auto slot = [&](const UnitPartition& u) { return wire(u) + fp32(u); };
  const int blocks = z.overlap_comm ? 2 : 1;
  if (z.tile_factor > 1) {
    const double bytes = replay_gather_pool(p, z, [&](int u) { return wire(units[u]); }) +
                         replay_gather_pool(p, z, [&](int u) { return fp32(units[u]); });
    b.add_persistent("gathered units", bytes,
                     "wte, wpe, a tiled block's small units and " + std::to_string(blocks) +
                         " tile(s) at a time as the pools allocate them, on the wire and in fp32");
  } else {
    b.add_persistent(
        "gathered units",
        slot(units[ParamTable::kWte]) + slot(units[ParamTable::kWpe]) + blocks * slot(units[largest_block]),
        "wte, wpe and " + std::to_string(blocks) + " block(s), on the wire and in fp32");
  }
  if (z.quantized_weights) {
    double kept = 0;
    for (const UnitPartition& u : units)
      kept += double(quant::quantized_bytes(u.shard, kQuantizedWeightBits, z.weight_block));
    b.add_persistent("quantized shards", kept, "(1+4/B)P/W, qwZ's int8 copy of this rank's shards");
  }
}

CpuBuffers cpu_buffers(const Partition& p, const ZeroConfig& z, int nodes, int micro_batch, int seq_len) {
  CpuBuffers b;
  const double W = p.world_size(), P = double(p.padded_total()), S = double(p.shard_total());
  const double cb = double(dtype_size(z.precision));
  const std::string dtype = precision_name(z.precision);
  b.add_persistent("tokens", 2.0 * 4 * micro_batch * seq_len, "int32 inputs and targets of one micro-batch");
  // The engine initializes master, m and v through a host buffer of min(S, sub_group_size) elements each
  // (ZeroEngine::write_state); with the optimizer on NVMe, through the swap buffers instead.
  b.startup = z.offload.optimizer_on_nvme() ? 0 : 12 * std::min(S, double(z.offload.sub_group_size));
  const std::vector<UnitPartition>& units = p.units();
  size_t largest_block = ParamTable::kWpe;  // the largest unit but the embeddings (wpe without blocks)
  for (size_t u = 0; u < units.size(); ++u) {
    const bool embedding = int(u) == ParamTable::kWte || int(u) == ParamTable::kWpe;
    if (!embedding &&
        (largest_block == size_t(ParamTable::kWpe) || units[u].padded > units[largest_block].padded))
      largest_block = u;
  }
  if (z.stage < 3) {
    // Stage 0 widens its compute weights when they are 16-bit; stages 1-2 receive them on the wire and
    // always keep an fp32 copy for the loop.
    if (z.stage > 0 || cb != 4) b.add_persistent("compute weights in fp32", 4 * P, "4P, the loop's copy");
  }
  if (z.stage == 0) {
    b.transient = cb * P;  // the gradients on the wire, pre-divided, during the all-reduce
    b.parts.push_back({"gradients on the wire", b.transient, dtype + " P, during the all-reduce"});
    const int64_t chunk = (p.padded_total() + p.world_size() - 1) / p.world_size();
    b.staging = ring_staging_bytes(p.world_size(), chunk, cb) + 4.0 * double(chunk);
    return b;
  }
  if (z.stage == 1) {
    b.transient = std::max(cb * P + 4 * S, cb * S);  // the reduce-scatter's send and result; the refresh
    b.parts.push_back({"reduce-scatter", cb * P + 4 * S, dtype + " P rank-major + fp32 P/W result"});
    b.staging = ring_staging_bytes(p.world_size(), p.shard_total(), cb);
    return b;
  }
  // Stages 2-3: pooled unit gradients (wte's stays open from the head to the embedding).
  b.add_persistent("unit gradients", 4.0 * double(units[ParamTable::kWte].numel) + other_unit_gradients(p, z),
                   z.tile_factor > 1 ? "fp32: wte's, a tiled block's small units' and its tiles' as pooled"
                                     : "fp32: wte's and the largest other unit's");
  if (z.stage == 3) add_gather_slots(p, z, largest_block, b);
  const bool qgz = z.quantized_gradients && nodes >= 2;
  const std::vector<int64_t> chunks = bucket_chunks(p, z);
  const size_t alive = z.overlap_comm ? 3 : 1;
  const double send_element = qgz ? 4.0 : cb;
  const double buckets = sum_of_largest<int64_t>(chunks, alive, [&](const int64_t& chunk) {
    double bytes = W * double(chunk) * send_element + 4.0 * double(chunk);
    if (qgz)
      bytes += 2 * W * double(quant::quantized_bytes(chunk, z.intra_node_gradient_bits, z.gradient_block));
    return bytes;
  });
  b.transient = std::max(buckets, z.stage == 2 ? cb * S : 0.0);  // stage 2's refresh comes after them
  b.parts.push_back(
      {"gradient buckets", buckets,
       std::to_string(std::min(alive, chunks.size())) + " x the largest bucket, sent and reduced"});
  if (!qgz)
    b.staging = ring_staging_bytes(p.world_size(), *std::max_element(chunks.begin(), chunks.end()), cb);
  return b;
}

// Tiers in memory and on disk, and the swap traffic of one step (planner.h).
void add_offload(const Partition& p, const ZeroConfig& z, int accumulation_steps, PlanMemory& m) {
  // Offload device "cpu" puts a state in the "cpu" tier (zero/memory_model.h): host memory beside a GPU, RAM
  // on the CPU backend, where every tier but "nvme" is RAM.
  for (const PlanMemoryLine& line : m.states) {
    double& tier = line.tier == "nvme" ? m.tiers.nvme : line.tier == "cpu" ? m.tiers.cpu : m.tiers.device;
    if (line.tier != "nvme") tier += line.bytes;
  }
  const OffloadLayout layout = make_offload_layout(p, z);
  m.tiers.nvme = double(layout.optimizer_file_bytes + layout.param_file_bytes);
  const double S = double(p.shard_total()), cb = double(dtype_size(z.precision));
  if (z.offload.optimizer_on_nvme()) {
    m.offload.nvme_read += 12 * S;
    m.offload.nvme_written += 12 * S;
  }
  if (z.offload.param_on_nvme()) {
    // A unit's shard is read for each gather: once per pass, and the tiles that a tiled block's
    // recomputation gathers once more in the backward.
    const LoopSchedule s = loop_schedule(int(p.units().size()), z.tile_factor, z.recompute);
    std::vector<bool> seen(p.units().size(), false);
    double regathered = 0;
    for (int u : s.backward) {
      if (seen[size_t(u)]) regathered += double(p.unit(u).shard);
      seen[size_t(u)] = true;
    }
    m.offload.param_read_forward = accumulation_steps * cb * S;
    m.offload.param_read_backward = accumulation_steps * cb * (S + regathered);
    m.offload.nvme_read += m.offload.param_read_forward + m.offload.param_read_backward;
    m.offload.nvme_written += cb * S;
  }
}

// Activations per rank under one recomputation: ours (what the layer loop allocates, restated tensor by
// tensor; equal to activation_elements at t = 1) and the paper's formula.
struct ActivationPair {
  double ours = 0, paper = 0;
};
ActivationPair activations_at(const GPTConfig& model, const ZeroConfig& z, int micro_batch,
                              int tensor_parallel, int element_bytes, const Recompute& recompute) {
  const ActivationShape shape = activation_shape(model, micro_batch);
  const ActivationSetup setup{tensor_parallel, z.sequence_parallel && tensor_parallel > 1, recompute,
                              z.distribute_saved_activations};
  return {double(restated_activations(shape, setup, element_bytes).total_bytes),
          paper_model_bytes(shape, setup)};
}

void add_activations(const GPTConfig& model, const ZeroConfig& z, int micro_batch, int tensor_parallel,
                     int element_bytes, PlanMemory& m) {
  auto at = [&](const Recompute& r) {
    return activations_at(model, z, micro_batch, tensor_parallel, element_bytes, r);
  };
  const ActivationPair full = at(Recompute{}), checkpointed = at(Recompute::full()),
                       selective = at(Recompute::selective()), configured = at(z.recompute);
  m.activations_full = full.ours;
  m.activations_checkpointed = checkpointed.ours;
  m.activations_selective = selective.ours;
  m.activations = configured.ours;
  m.activations_paper_full = full.paper;
  m.activations_paper_checkpointed = checkpointed.paper;
  m.activations_paper_selective = selective.paper;
  m.activations_paper = configured.paper;
}

PlanTiming predict_time(const Plan& plan, const PlanVariant& v) {
  const PlanOptions& c = plan.cluster;
  PlanTiming t;
  const double tokens_per_gpu = double(plan.micro_batch) * plan.accumulation_steps * plan.model.seq_len;
  // A tensor-parallel group computes its micro-batches together, each rank 1/t of every layer's FLOPs.
  const double flops_per_s = c.gpu_tflops * 1e12 * plan.tensor_parallel;
  // The forward is a third of 6N + 12LCT, the backward two thirds; recomputation repeats the forward.
  const double base = plan.model.model_flops_per_token() * tokens_per_gpu;
  t.compute_forward = base / 3 / flops_per_s;
  const double recomputed = recompute_flops_per_token(plan.model, v.zero.recompute) * tokens_per_gpu;
  t.compute_backward = (base * 2 / 3 + recomputed) / flops_per_s;
  // The tensor-parallel collectives sit between a layer's GEMMs: the layer waits for them.
  t.tensor_forward = plan.tensor_forward_s;
  t.tensor_backward = plan.tensor_backward_s;
  // Send bytes: each GPU has its own intra-node link; a node's inter-node link carries what all its GPUs
  // send across nodes. The two link classes work at the same time, so a phase takes the slower of the two.
  const comm::Phase phases[3] = {comm::Phase::kParamGatherFwd, comm::Phase::kParamGatherBwd,
                                 comm::Phase::kGradReduce};
  for (int p = 0; p < 3; ++p) {
    t.link[p][0] =
        double(v.traffic.at(phases[p], comm::Link::kIntraNode)) / plan.world / c.intra_node_bytes_per_s;
    t.link[p][1] =
        double(v.traffic.at(phases[p], comm::Link::kInterNode)) / c.nodes / c.inter_node_bytes_per_s;
    t.comm[p] = std::max(t.link[p][0], t.link[p][1]);
  }
  // Overlap hides stage 3's gathers behind the compute of their pass and (stages 2, 3) the bucket
  // reductions behind the backward; what runs between passes (stages 0, 1 reduce at the boundary; stages
  // 1, 2 gather after the optimizer step) is never hidden.
  const bool gathers_overlap = v.zero.overlap_comm && v.zero.stage == 3;
  const bool reduce_overlaps = v.zero.overlap_comm && v.zero.stage >= 2;
  const double fwd = gathers_overlap ? t.comm[0] : 0, bwd = gathers_overlap ? t.comm[1] : 0;
  const double reduce = reduce_overlaps ? t.comm[2] : 0;
  const double serial = (t.comm[0] - fwd) + (t.comm[1] - bwd) + (t.comm[2] - reduce);
  // The disk: a node's GPUs share it, so each moves its bytes at 1/gpus_per_node of the rate. Parameter
  // reads run ahead of their pass's gathers (hidden with overlap_comm, as the gathers are); the optimizer's
  // swap and the parameter writes run between the backward and the next forward and add to the step.
  const PlanOffloadTraffic& io = v.memory.offload;
  const double share = c.gpus_per_node;
  t.nvme_read = io.nvme_read * share / c.nvme_read_bytes_per_s;
  t.nvme_write = io.nvme_written * share / c.nvme_write_bytes_per_s;
  const double hidden_fwd_read =
      v.zero.overlap_comm ? io.param_read_forward * share / c.nvme_read_bytes_per_s : 0;
  const double hidden_bwd_read =
      v.zero.overlap_comm ? io.param_read_backward * share / c.nvme_read_bytes_per_s : 0;
  const double disk_serial = t.nvme_read + t.nvme_write - hidden_fwd_read - hidden_bwd_read;
  t.step = std::max({t.compute_forward + t.tensor_forward, fwd, hidden_fwd_read}) +
           std::max({t.compute_backward + t.tensor_backward, bwd + reduce, hidden_bwd_read}) + serial +
           disk_serial;
  t.tokens_per_s = t.step > 0 ? double(plan.global_batch) * plan.model.seq_len / t.step : 0;
  return t;
}

}  // namespace

double PlanMemory::of(const std::string& state) const {
  for (const PlanMemoryLine& line : states) {
    if (line.state == state) return line.bytes;
  }
  return 0;
}

comm::TrafficCounts plan_step_traffic(const GPTConfig& model, const ZeroConfig& zero, int nodes,
                                      int ranks_per_node, int accumulation_steps, int tensor_parallel) {
  const int t = tensor_parallel;
  const ParamTable table = make_param_table(model, zero.tile_factor, TensorSlice{t, 0});
  const Partition partition = make_partition(table, zero, nodes * ranks_per_node / t);
  const comm::TrafficCounts group =
      expected_step_traffic(TrafficModelInput{&partition, zero, ranks_per_node / t, accumulation_steps});
  // The t data-parallel groups (one per tensor-parallel rank) move the same bytes: their slices are the same
  // size and their members sit on the same nodes.
  comm::TrafficCounts all;
  for (int g = 0; g < t; ++g) all += group;
  return all;
}

double recompute_flops_per_token(const GPTConfig& model, const Recompute& recompute) {
  const double C = model.hidden, T = model.seq_len, L = model.num_layers;
  // A block's forward is 2 x 12C^2 (its matrices) + 4CT (QK^T and AV) per token.
  if (recompute.is_selective()) return 4 * C * T * L;
  if (!recompute.is_full()) return 0;
  const double layers =
      recompute.method == RecomputeMethod::kUniform ? L : std::min<double>(recompute.num_layers, L);
  return layers * (24 * C * C + 4 * C * T);
}

int64_t activation_elements(const GPTConfig& model, int micro_batch, const Recompute& recompute) {
  const int64_t B = micro_batch, T = model.seq_len, C = model.hidden, L = model.num_layers;
  const int64_t BT = B * T, BTC = BT * C;
  // BlockActivations: ln1, atty, residual2, ln2 [BT,C]; qkv [BT,3C]; fch, fch_gelu [BT,4C]; four [BT]
  // LayerNorm statistics; the attention probabilities [B,NH,T,T].
  const int64_t probs = B * model.heads * T * T;
  const int64_t block = 15 * BTC + 4 * BT + probs;
  const int64_t scratch = 14 * BTC;  // BlockScratch: d_fch_gelu, d_fch, d_qkv, d_ln2, d_atty, d_ln1
  const int64_t head = 2 * BTC + BT * model.padded_vocab() + 4 * BT;  // lnf, dlnf, logits, stats, losses
  const int64_t residual_gradient = BTC;
  // Kept block inputs (and the output) and activation sets (model/recompute.h):
  //   none, selective: every input, L sets (selective: one set of attention probabilities for all);
  //   full uniform N:  each chunk's input, the output, N-1 inner inputs of the chunk being recomputed, N
  //   sets; full block N:    every input, a set for each of the L-N kept blocks and one for the recomputed
  //   block.
  int64_t inputs = L + 1, sets = L, extra = 0;
  if (recompute.is_selective()) extra = -(L - 1) * probs;
  if (recompute.is_full()) {
    extra = BTC;  // the output of a chunk's last block, recomputed and discarded
    if (recompute.method == RecomputeMethod::kUniform) {
      const int64_t n = std::min<int64_t>(recompute.num_layers, L);
      inputs = (L + n - 1) / n + 1 + (n - 1);
      sets = n;
    } else {
      const int64_t n = std::min<int64_t>(recompute.num_layers, L);
      sets = L - n + (n > 0 ? 1 : 0);
    }
  }
  return inputs * BTC + sets * block + extra + scratch + head + residual_gradient;
}

PlanMemory plan_memory(const GPTConfig& model, const ZeroConfig& z, int nodes, int ranks_per_node,
                       int micro_batch, int accumulation_steps, MemoryTarget target, int tensor_parallel) {
  // One rank's tensor-parallel slice (all slices are the same size), partitioned over its d data-parallel
  // ranks.
  const int data_parallel = nodes * ranks_per_node / tensor_parallel;
  const ParamTable table = make_param_table(model, z.tile_factor, TensorSlice{tensor_parallel, 0});
  const Partition p = make_partition(table, z, data_parallel);
  const bool cpu = target == MemoryTarget::kCpu;
  // The CPU backend's loop computes in fp32 whatever the compute dtype.
  const double ab = cpu ? 4 : double(dtype_size(z.precision));
  const std::string a = ab == 2 ? "2" : "4";
  PlanMemory m;
  for (const StateFormula& f : zero_state_formulas(p, z, nodes)) {
    m.states.push_back({f.state, f.bytes, f.formula, f.tier});
    if (f.tier != "nvme") m.model_states += f.bytes;
  }
  double buffers = 0;
  CpuBuffers host;
  if (cpu) {
    host = cpu_buffers(p, z, nodes, micro_batch, model.seq_len);
    m.buffers = host.parts;
    buffers = host.persistent + host.transient;
  } else {
    m.buffers = buffer_lines(p, z, nodes);
    for (const PlanMemoryLine& line : m.buffers) buffers += line.bytes;
  }
  m.states.push_back({"buffers", buffers, "below"});
  if (cpu) {
    m.states.push_back({"communication staging", host.staging, "the MPI ring's buffers, outside the arenas"});
    const double startup = std::max(0.0, host.startup - host.transient - host.staging);
    if (startup > 0) {
      m.states.push_back({"start-up copy", startup,
                          "the engine's host buffer for the initial state, 12 min(P/W, sub_group_size), "
                          "beyond the step's transients"});
    }
  }
  add_activations(model, z, micro_batch, tensor_parallel, int(ab), m);
  std::string where;
  if (tensor_parallel > 1) {
    where = ", per rank at t = " + std::to_string(tensor_parallel) +
            (z.sequence_parallel ? " with sequence parallelism" : " without sequence parallelism");
  }
  m.states.push_back({"activations", m.activations,
                      std::string("one micro-batch, ") + a + " bytes per element" +
                          (z.recompute.granularity == RecomputeGranularity::kNone
                               ? ""
                               : ", recompute " + z.recompute.describe()) +
                          where});
  add_offload(p, z, accumulation_steps, m);
  for (const PlanMemoryLine& line : m.states) {
    if (line.tier != "nvme") m.total += line.bytes;
  }
  return m;
}

namespace {

std::string str(int64_t v) {
  return std::to_string(v);
}

// Why the plan cannot use the configured tensor-parallel size on the cluster (empty when it can): the
// layout's rules (ParallelLayout::problems, model/params.h), which gpt_train's options and the engine ask
// too.
std::string tensor_parallel_problem(const TrainOptions& o) {
  const ParallelLayout layout{.tensor_parallel = o.tensor_parallel,
                              .ranks_per_node = o.plan.gpus_per_node,
                              .node_flag = "--gpus-per-node",
                              .sequence_parallel = o.zero.sequence_parallel,
                              .tile_factor = o.zero.tile_factor};
  return first_problem(layout.problems(o.model));
}

void check_plannable(const TrainOptions& o) {
  const PlanOptions& c = o.plan;
  if (c.nodes < 1 || c.gpus_per_node < 1) {
    throw UsageError(
        "--nodes and --gpus-per-node must be at least 1, for example --nodes 4 --gpus-per-node 16");
  }
  if (!(c.gpu_memory_bytes > 0 && c.intra_node_bytes_per_s > 0 && c.inter_node_bytes_per_s > 0 &&
        c.gpu_tflops > 0 && c.nvme_read_bytes_per_s > 0 && c.nvme_write_bytes_per_s > 0)) {
    throw UsageError(
        "--gpu-memory, --intra-node-bandwidth, --inter-node-bandwidth, --gpu-tflops, --nvme-read-bandwidth "
        "and --nvme-write-bandwidth must be positive");
  }
  if (std::string problem = o.model.validate(); !problem.empty()) throw UsageError(problem);
  if (o.micro_batch < 1 || o.accumulation_steps < 1) {
    throw UsageError("the micro-batch and the accumulation steps must be at least 1");
  }
  if (std::string problem = tensor_parallel_problem(o); !problem.empty()) throw UsageError(problem);
}

// The configured stage (when below 3) and every stage 3 combination of qwZ, hpZ and qgZ, over the
// data-parallel topology `dp`; hpZ's h is the configured one, else the data-parallel ranks per node.
std::vector<PlanVariant> zero_variants(const ZeroConfig& zero, const comm::Topology& dp,
                                       int tensor_parallel) {
  std::vector<PlanVariant> variants;
  const int h = zero.hpz_partition_size > 1 ? zero.hpz_partition_size : dp.ranks_per_node;
  if (zero.stage != 3) {
    PlanVariant v;
    v.name = "stage " + std::to_string(zero.stage);
    v.zero = zero;
    v.configured = true;
    v.problem = first_problem(zero.problems(dp));
    variants.push_back(v);
  }
  for (const Combination& combo : kCombinations) {
    PlanVariant v;
    v.name = combo.name;
    v.zero = zero;
    v.zero.stage = 3;
    v.zero.quantized_weights = combo.qwz;
    v.zero.hpz_partition_size = combo.hpz ? h : 1;
    v.zero.quantized_gradients = combo.qgz;
    v.zero.loco = zero.loco && combo.qgz;  // the configured error feedback goes with qgZ
    v.configured = zero.stage == 3 && zero.quantized_weights == combo.qwz &&
                   (zero.hpz_partition_size > 1) == combo.hpz && zero.quantized_gradients == combo.qgz;
    v.problem = first_problem(v.zero.problems(dp));
    if (v.problem.empty() && combo.hpz && h < 2) {
      v.problem = tensor_parallel > 1
                      ? "hpZ needs at least 2 data-parallel ranks per node (GPUs per node / t)"
                      : "hpZ needs at least 2 GPUs per node";
    }
    variants.push_back(v);
  }
  return variants;
}

// The plan of the configured setup, without the tensor-parallel sweep.
Plan plan_of(const TrainOptions& o) {
  check_plannable(o);
  const PlanOptions& c = o.plan;
  Plan plan;
  plan.model = o.model;
  plan.cluster = c;
  plan.world = c.nodes * c.gpus_per_node;
  const int t = o.tensor_parallel;
  plan.tensor_parallel = t;
  plan.data_parallel = plan.world / t;
  plan.sequence_parallel = o.zero.sequence_parallel && t > 1;
  plan.distribute_saved_activations = o.zero.distribute_saved_activations && t > 1;
  plan.micro_batch = o.micro_batch;
  plan.accumulation_steps = o.accumulation_steps;
  const int64_t batch = int64_t(o.micro_batch) * o.accumulation_steps * plan.data_parallel;
  plan.global_batch = batch;
  if (o.global_batch != 0 && o.global_batch != batch) {
    plan.notes.push_back("the global batch " + std::to_string(o.global_batch) + " is not micro-batch x " +
                         (t > 1 ? "accumulation x data-parallel ranks" : "accumulation x GPUs") +
                         "; planned with " + std::to_string(batch));
  }
  const ParamTable table = make_param_table(o.model, o.zero.tile_factor);
  plan.params = table.total;
  plan.params_for_flops = o.model.params_without_positions();
  const ParamTable slice = make_param_table(o.model, o.zero.tile_factor, TensorSlice{t, 0});
  plan.padded_params = Partition(slice, plan.data_parallel, plan.data_parallel).padded_total();
  plan.flops_per_token =
      o.model.model_flops_per_token() + recompute_flops_per_token(o.model, o.zero.recompute);
  ZeroConfig zero = o.zero;
  zero.sequence_parallel = plan.sequence_parallel;
  plan.tensor_traffic = expected_tensor_parallel_traffic(
      TensorTrafficInput{o.model, o.micro_batch, o.accumulation_steps, t, plan.data_parallel,
                         plan.sequence_parallel, o.zero.recompute, plan.distribute_saved_activations});
  const auto seconds = [&](comm::Phase phase) {
    return double(plan.tensor_traffic.at(phase, comm::Link::kIntraNode)) / plan.world /
           c.intra_node_bytes_per_s;
  };
  plan.tensor_forward_s = seconds(comm::Phase::kTpFwd);
  plan.tensor_backward_s = seconds(comm::Phase::kTpBwd) + seconds(comm::Phase::kActGather);

  const comm::Topology world{plan.world, 0, c.gpus_per_node, false};
  const comm::Topology dp = ZeroEngine::data_parallel_topology(world, t, 0);
  plan.variants = zero_variants(zero, dp, t);
  for (size_t i = 0; i < plan.variants.size(); ++i) {
    PlanVariant& v = plan.variants[i];
    if (v.configured) plan.configured = int(i);
    v.memory = plan_memory(o.model, v.zero, c.nodes, c.gpus_per_node, o.micro_batch, o.accumulation_steps,
                           MemoryTarget::kGpu, t);
    if (!v.problem.empty()) continue;
    v.traffic = plan_step_traffic(o.model, v.zero, c.nodes, c.gpus_per_node, o.accumulation_steps, t);
    v.timing = predict_time(plan, v);
  }
  if (c.nodes == 1) plan.notes.push_back("one node: qgZ falls back to the ring reduce-scatter");
  return plan;
}

// One sweep row: the configured options at tensor-parallel size t, with or without sequence parallelism.
// hpZ's h shrinks to the data-parallel ranks per node where the configured h does not divide them.
PlanTensorRow sweep_row(const TrainOptions& configured, int t, bool sequence_parallel) {
  TrainOptions o = configured;
  o.tensor_parallel = t;
  o.zero.sequence_parallel = sequence_parallel;
  o.zero.distribute_saved_activations = configured.zero.distribute_saved_activations && t > 1 &&
                                        !sequence_parallel && o.zero.recompute.is_full();
  o.global_batch = 0;
  PlanTensorRow row;
  row.t = t;
  row.d = o.plan.nodes * o.plan.gpus_per_node / t;
  row.sequence_parallel = sequence_parallel;
  row.global_batch = int64_t(o.micro_batch) * o.accumulation_steps * row.d;
  row.problem = tensor_parallel_problem(o);
  if (!row.problem.empty()) return row;
  const int per_node = o.plan.gpus_per_node / t, h = o.zero.hpz_partition_size;
  if (h > 1 && per_node % h != 0) o.zero.hpz_partition_size = per_node >= 2 ? per_node : 1;
  row.hpz = o.zero.hpz_partition_size;
  const Plan plan = plan_of(o);
  const PlanVariant& v = plan.variants[plan.configured];
  row.problem = v.problem;
  row.model_states = v.memory.model_states;
  row.activations = v.memory.activations;
  row.activations_paper = v.memory.activations_paper;
  row.memory = v.memory.tiers.device;
  row.fits = row.memory <= o.plan.gpu_memory_bytes;
  row.tensor_bytes = plan.tensor_traffic.total();
  if (!row.problem.empty()) return row;
  row.zero_intra = v.traffic.total(comm::Link::kIntraNode);
  row.zero_inter = v.traffic.total(comm::Link::kInterNode);
  row.step = v.timing.step;
  row.tokens_per_s = v.timing.tokens_per_s;
  return row;
}

// t = 1, 2, 4, 8 and the configured t, those that keep a group inside one node; without and (t > 1) with
// sequence parallelism.
std::vector<PlanTensorRow> tensor_sweep(const TrainOptions& o) {
  std::vector<int> sizes = {1, 2, 4, 8};
  if (std::find(sizes.begin(), sizes.end(), o.tensor_parallel) == sizes.end())
    sizes.push_back(o.tensor_parallel);
  std::vector<PlanTensorRow> rows;
  for (int t : sizes) {
    if (o.plan.gpus_per_node % t != 0) continue;
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      rows.push_back(sweep_row(o, t, sp));
    }
  }
  return rows;
}

}  // namespace

Plan make_plan(const TrainOptions& o) {
  Plan plan = plan_of(o);
  plan.tensor_sweep = tensor_sweep(o);
  return plan;
}

}  // namespace gpt
