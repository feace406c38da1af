// WeightGatherer: scheduled all-gathers of compute-weight shards with one-ahead prefetch, qwZ and hpZ; see
// gather.h.
#include "zero/gather.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/quant/quantize.h"
#include "zero/param_swap.h"

namespace gpt {

// Where the gatherer finds this rank's shard of a unit (dtype of the precision, wire memory) for a primary
// gather or for qwZ's quantization: in the shard the engine names at each pass, or read from NVMe by
// ParamSwap in the pass's order.
class OwnShards {
 public:
  virtual ~OwnShards() = default;
  // A pass begins: shard is the engine's resident shard (null when it lives on NVMe); units are those whose
  // own shard this pass will need, in order.
  virtual void begin_pass(const void* shard, std::vector<int> units) = 0;
  // This rank's shard of unit, valid until release(unit).
  virtual const void* acquire(int unit) = 0;
  virtual void release(int unit) = 0;
};

namespace {

class ResidentShards final : public OwnShards {
 public:
  ResidentShards(const Partition& partition, size_t element_bytes)
      : partition_(partition), element_bytes_(element_bytes) {}
  void begin_pass(const void* shard, std::vector<int>) override {
    shard_ = static_cast<const uint8_t*>(shard);
  }
  const void* acquire(int unit) override {
    return shard_ + size_t(partition_.unit(unit).shard_offset) * element_bytes_;
  }
  void release(int) override {}  // the shard stays where it is

 private:
  const Partition& partition_;
  size_t element_bytes_;
  const uint8_t* shard_ = nullptr;
};

class SwappedShards final : public OwnShards {
 public:
  explicit SwappedShards(ParamSwap& swap) : swap_(swap) {}
  void begin_pass(const void*, std::vector<int> units) override { swap_.begin_pass(std::move(units)); }
  const void* acquire(int unit) override { return swap_.acquire(unit); }
  void release(int unit) override { swap_.release(unit); }  // its buffer takes the next read

 private:
  ParamSwap& swap_;
};

}  // namespace

WeightGatherer::WeightGatherer(const Partition& partition, const std::vector<std::string>& unit_names,
                               comm::Communicator& dp, comm::Communicator* hpz, const ZeroConfig& config,
                               const EngineContext& context, ParamSwap* swap, comm::Communicator* node,
                               comm::Communicator* cross, bool half_loop)
    : partition_(partition),
      names_(unit_names),
      dp_(dp),
      hpz_(hpz),
      node_(node),
      cross_(cross),
      config_(config),
      element_bytes_(dtype_size(config.precision)),
      weights_dtype_(half_loop ? config.precision : loop_dtype(config.precision)),
      context_(context),
      ops_(context.ops),
      events_(context.events),
      own_(swap ? std::unique_ptr<OwnShards>(std::make_unique<SwappedShards>(*swap))
                : std::make_unique<ResidentShards>(partition, element_bytes_)),
      // A dry run (kernels/dry) decodes nothing: one call per unit instead of one per rank's block keeps
      // the planner's runs of large worlds fast, and allocates the same buffers.
      decode_on_arrival_(context.ops.device() == Device::kCPU && context.ops.computes()),
      secondaries_(partition.units().size(), nullptr),
      quantized_own_(partition.units().size(), nullptr),
      kept_(partition.units().size(), nullptr),
      kept_capacity_(partition.units().size(), 0) {
  if (config.quantized_weights && loop_dtype(config.precision) != DType::kF32)
    throw std::invalid_argument(
        "qwZ dequantizes gathered weights into fp32 or the compute dtype; the loop "
        "computes in " +
        std::string(dtype_name(loop_dtype(config.precision))));
}

WeightGatherer::~WeightGatherer() {
  for (Slot& slot : slots_) slot.request.wait();
  for (Slot& slot : slots_) {
    context_.wire.release(slot.wire);
    context_.device.release(slot.weights);
  }
  slots_.clear(), ahead_ = false;
  weights_changed();  // the kept weights go back to the pool, released next
  for (const FreeBuffer& b : free_buffers_) b.arena->release(b.data);
}

size_t WeightGatherer::shard_wire_bytes(int unit) const {
  const int64_t s = partition_.unit(unit).shard;
  return config_.quantized_weights ? quant::quantized_bytes(s, kQuantizedWeightBits, config_.weight_block)
                                   : size_t(s) * element_bytes_;
}

size_t WeightGatherer::secondary_bytes(int unit) const {
  return hpz_ ? shard_wire_bytes(unit) * size_t(dp_.size() / hpz_->size()) : 0;
}

size_t WeightGatherer::secondary_bytes_held() const {
  size_t total = 0;
  for (size_t u = 0; u < secondaries_.size(); ++u) total += secondaries_[u] ? secondary_bytes(int(u)) : 0;
  return total;
}

void WeightGatherer::weights_changed() {
  if (ahead_) drop_posted(), ahead_ = false;  // it carries the old weights
  for (std::vector<void*>* copies : {&secondaries_, &quantized_own_}) {
    for (void*& copy : *copies) {
      context_.wire.release(copy);
      copy = nullptr;
    }
  }
  for (size_t u = 0; u < kept_.size(); ++u) {
    give_buffer(context_.device, kept_[u], kept_capacity_[u]);
    kept_[u] = nullptr;
  }
}

const void* WeightGatherer::quantized_own_shard(int unit) {
  if (!quantized_own_[unit]) {
    const UnitPartition& u = partition_.unit(unit);
    const size_t bytes = shard_wire_bytes(unit);
    quantized_own_[unit] = context_.wire.allocate_for_overwrite("qwZ quantized shard " + names_[unit],
                                                                "buffers: quantized shards", bytes);
    ops_.quantize(context_.view(quantized_own_[unit], int64_t(bytes), DType::kI8),
                  context_.view(own_shard(unit), u.shard, config_.precision), u.shard, 1,
                  kQuantizedWeightBits, config_.weight_block);
    own_->release(unit);
  }
  return quantized_own_[unit];
}

const void* WeightGatherer::own_shard(int unit) {
  return own_->acquire(unit);
}

bool WeightGatherer::needs_own_shard(int unit) const {
  return !kept_[unit] && !secondaries_[unit] && !(config_.quantized_weights && quantized_own_[unit]);
}

void WeightGatherer::begin_pass(std::vector<int> schedule, comm::Phase phase, const void* shard) {
  if (ahead_) {
    ahead_ = false;
    if (schedule == schedule_ && phase == phase_) return;  // its first gather is already on the way
    drop_posted();  // another pass came first (an evaluation): the gather begun ahead served nothing
  }
  if (!idle()) throw std::logic_error("WeightGatherer: a pass began while units were still gathered");
  schedule_ = std::move(schedule);
  next_ = 0;
  phase_ = phase;
  std::vector<int> reads;
  for (int unit : schedule_) {
    if (needs_own_shard(unit)) reads.push_back(unit);
  }
  own_->begin_pass(shard, std::move(reads));
}

void WeightGatherer::begin_pass_ahead(std::vector<int> schedule, comm::Phase phase, const void* shard) {
  begin_pass(std::move(schedule), phase, shard);
  prefetch(0);  // the engine begins a pass ahead only with overlap_comm
  ahead_ = true;
}

void WeightGatherer::finish_ahead() {
  if (!ahead_) return;
  for (Slot& slot : slots_) slot.request.wait();
}

void WeightGatherer::drop_posted() {
  for (Slot& slot : slots_) {
    if (slot.acquired)
      throw std::logic_error("WeightGatherer: " + names_[slot.unit] + " dropped while in use");
    slot.request.wait();  // the cross-node step alone, when its spread was never posted (on every rank alike)
    if (slot.holds_own_shard) own_->release(slot.unit);
    give_buffer(context_.wire, slot.wire, slot.wire_capacity);
    give_buffer(context_.device, slot.weights, slot.weight_capacity);
  }
  slots_.clear();
}

void* WeightGatherer::take_buffer(Arena& arena, size_t bytes, const char* name, size_t* capacity) {
  auto best = free_buffers_.end();
  for (auto it = free_buffers_.begin(); it != free_buffers_.end(); ++it) {
    if (it->arena == &arena && it->bytes >= bytes && (best == free_buffers_.end() || it->bytes < best->bytes))
      best = it;
  }
  if (best == free_buffers_.end()) {
    *capacity = bytes;
    return arena.allocate(name, "buffers: gathered units", bytes);
  }
  void* buffer = best->data;
  *capacity = best->bytes;
  free_buffers_.erase(best);
  return buffer;
}

void WeightGatherer::give_buffer(Arena& arena, void* buffer, size_t bytes) {
  if (buffer) free_buffers_.push_back({&arena, buffer, bytes});
}

WeightGatherer::Slot* WeightGatherer::slot_of(int unit) {
  for (Slot& slot : slots_) {
    if (slot.unit == unit) return &slot;
  }
  return nullptr;
}

void WeightGatherer::post(size_t index) {
  const int unit = schedule_[index];
  const UnitPartition& u = partition_.unit(unit);
  const size_t per_rank = shard_wire_bytes(unit);
  Slot slot;
  slot.unit = unit;
  slot.wire_bytes = per_rank * size_t(dp_.size());
  slot.wire = take_buffer(context_.wire, slot.wire_bytes, "gathered unit", &slot.wire_capacity);
  slot.weight_bytes = dtype_bytes(weights_dtype_, u.padded);
  slot.weights = take_buffer(context_.device, slot.weight_bytes, "gathered unit in the loop dtype",
                             &slot.weight_capacity);
  slot.from_secondary = secondaries_[unit] != nullptr;
  const comm::OperationLabel serving("gather of " + names_[unit]);  // for the watchdog's message
  if (slot.from_secondary) {
    // hpZ: the h ranks of this node's group hold consecutive runs of W/h shards; a ring among them rebuilds
    // the rank-major buffer of all W shards without leaving the node.
    context_.before_communication(*hpz_);
    slot.request = hpz_->all_gather(secondaries_[unit], slot.wire, secondary_bytes(unit), phase_);
  } else {
    // qwZ may quantize the shard here: the ops finish it before the communicator reads the bytes.
    const void* own = config_.quantized_weights ? quantized_own_shard(unit) : own_shard(unit);
    slot.holds_own_shard = !config_.quantized_weights;
    if (dp_.size() == 1) {
      // One rank: the gather is a copy of the own shard, made by the backend in its order (the request stays
      // complete).
      const int64_t n = int64_t(per_rank);
      ops_.copy(context_.view(slot.wire, n, DType::kI8), context_.view(own, n, DType::kI8));
    } else if (cross_) {
      // Hierarchical: this rank's shard to the ranks with its local index, into its block of the node's
      // spread (block l of N shards, node-ordered); spread() sends the block around the node.
      const size_t block = size_t(cross_->size()) * per_rank;
      context_.before_communication(*cross_);
      slot.request = cross_->all_gather(own, static_cast<uint8_t*>(slot.wire) + size_t(node_->rank()) * block,
                                        per_rank, phase_);
      slot.local_index_major = slot.spread_pending = true;
    } else {
      context_.before_communication(dp_);
      slot.request = dp_.all_gather(own, slot.wire, per_rank, phase_);
    }
  }
  events_.add(EngineEvent::Kind::kPostGather, names_[unit], phase_ == comm::Phase::kParamGatherBwd);
  slots_.push_back(std::move(slot));
}

void WeightGatherer::spread(Slot& slot) {
  if (!slot.spread_pending) return;
  slot.request.wait();
  const size_t block = size_t(cross_->size()) * shard_wire_bytes(slot.unit);
  uint8_t* wire = static_cast<uint8_t*>(slot.wire);
  const comm::OperationLabel serving("spread of " + names_[slot.unit]);
  context_.before_communication(*node_);
  slot.request = node_->all_gather(wire + size_t(node_->rank()) * block, wire, block, phase_);
  slot.spread_pending = false;
}

int WeightGatherer::position_of(const Slot& slot, int rank) const {
  if (!slot.local_index_major) return rank;
  const int L = node_->size(), N = cross_->size();
  return rank % L * N + rank / L;
}

void WeightGatherer::decode(const Slot& slot, int first, int shards, int at) {
  const UnitPartition& u = partition_.unit(slot.unit);
  const int64_t begin = first * u.shard;  // the first element of those shards in the unit
  const size_t shard_bytes = shard_wire_bytes(slot.unit), wire_at = size_t(at) * shard_bytes;
  void* weights = static_cast<char*>(slot.weights) + dtype_bytes(weights_dtype_, begin);
  const void* wire = static_cast<const char*>(slot.wire) + wire_at;
  if (config_.quantized_weights) {
    // Every shard, this rank's own included, becomes dequant(quant(shard)) rounded to the compute dtype.
    ops_.dequantize(context_.view(weights, shards * u.shard, weights_dtype_),
                    context_.view(wire, int64_t(shards * shard_bytes), DType::kI8), u.shard, shards,
                    kQuantizedWeightBits, config_.weight_block, config_.precision);
  } else {
    // The padding after the last parameter is not model state: only [begin, numel) is cast.
    const int64_t n = std::clamp<int64_t>(u.numel - begin, 0, shards * u.shard);
    if (n > 0)
      ops_.cast(context_.view(weights, n, weights_dtype_), context_.view(wire, n, config_.precision));
  }
}

void WeightGatherer::wait_and_decode(Slot& slot) {
  spread(slot);
  if (slot.local_index_major) {
    // Rank by rank: consecutive ranks' shards are N positions apart.
    slot.request.wait();
    for (int r = 0; r < dp_.size(); ++r) decode(slot, r, 1, position_of(slot, r));
    return;
  }
  if (!decode_on_arrival_) {
    slot.request.wait();
    decode(slot, 0, dp_.size(), 0);
    return;
  }
  // The gather's blocks (one per rank of its group: a shard each, or W/h shards from an hpZ secondary) are
  // decoded in the ring's order of arrival, this rank's own first, each while the later ones are still on
  // the way: dequantization on the gather's arrival path rather than after it.
  comm::Communicator& group = slot.from_secondary ? *hpz_ : dp_;
  const int blocks = group.size(), shards_per_block = dp_.size() / blocks;
  for (int k = 0; k < blocks; ++k) {
    const int block = (group.rank() - k + blocks) % blocks;
    slot.request.wait_block(block);
    decode(slot, block * shards_per_block, shards_per_block, block * shards_per_block);
  }
  slot.request.wait();
}

const void* WeightGatherer::acquire_weights(int unit) {
  if (next_ >= schedule_.size() || schedule_[next_] != unit) {
    throw std::logic_error("WeightGatherer: unit " + names_[unit] + " acquired out of schedule");
  }
  if (kept_[unit]) {  // gathered earlier since the weights last changed
    prefetch(next_ + 1);
    ++next_;
    return kept_[unit];
  }
  if (!slot_of(unit)) post(next_);
  // The spread inside the node goes out before the next unit's cross-node step, which then runs while this
  // unit spreads and computes.
  spread(*slot_of(unit));
  prefetch(next_ + 1);
  ++next_;
  Slot* slot = slot_of(unit);
  wait_and_decode(*slot);
  if (slot->holds_own_shard) own_->release(unit), slot->holds_own_shard = false;
  events_.add(EngineEvent::Kind::kWaitGather, names_[unit], phase_ == comm::Phase::kParamGatherBwd);
  slot->acquired = true;
  return slot->weights;
}

void WeightGatherer::prefetch(size_t index) {
  if (config_.overlap_comm && index < schedule_.size() && !kept_[schedule_[index]] &&
      !slot_of(schedule_[index]))
    post(index);
}

void WeightGatherer::release(int unit) {
  for (auto it = slots_.begin(); it != slots_.end(); ++it) {
    if (it->unit != unit) continue;
    if (!it->acquired)
      throw std::logic_error("WeightGatherer: " + names_[unit] + " released before acquired");
    if (config_.gather_once_per_step) {  // kept for the rest of the step; the wire buffer goes back
      kept_[unit] = it->weights, kept_capacity_[unit] = it->weight_capacity;
      give_buffer(context_.wire, it->wire, it->wire_capacity);
      slots_.erase(it);
      return;
    }
    if (hpz_ && !it->from_secondary && !secondaries_[unit]) {
      // Keep this rank's slice of the group's share: the bytes of shards [j W/h, (j+1) W/h), j = rank mod h,
      // exactly as they arrived. Copied by an op: wire memory may be device memory (under NCCL).
      const size_t bytes = secondary_bytes(unit);
      secondaries_[unit] =
          context_.wire.allocate_for_overwrite("hpZ secondary " + names_[unit], "hpZ secondary", bytes);
      keep_secondary(*it, secondaries_[unit]);
      secondary_peak_ = std::max(secondary_peak_, secondary_bytes_held());
    }
    give_buffer(context_.wire, it->wire, it->wire_capacity);
    give_buffer(context_.device, it->weights, it->weight_capacity);
    slots_.erase(it);
    return;
  }
  if (kept_[unit]) return;  // handed out from what was kept: nothing to give back
  throw std::logic_error("WeightGatherer: " + names_[unit] + " released but not gathered");
}

void WeightGatherer::keep_secondary(const Slot& slot, void* secondary) {
  const size_t bytes = secondary_bytes(slot.unit), shard = shard_wire_bytes(slot.unit);
  const int shards = dp_.size() / hpz_->size(), first = hpz_->rank() * shards;
  auto* wire = static_cast<const uint8_t*>(slot.wire);
  auto copy = [&](size_t to, size_t from, size_t n) {
    ops_.copy(context_.view(static_cast<uint8_t*>(secondary) + to, int64_t(n), DType::kI8),
              context_.view(wire + from, int64_t(n), DType::kI8));
  };
  if (!slot.local_index_major) return copy(0, size_t(first) * shard, bytes);
  for (int i = 0; i < shards; ++i)
    copy(size_t(i) * shard, size_t(position_of(slot, first + i)) * shard, shard);
}

bool WeightGatherer::idle() const {
  return slots_.empty();
}

}  // namespace gpt
