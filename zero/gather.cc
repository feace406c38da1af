// WeightGatherer: scheduled all-gathers of compute-weight shards with one-ahead prefetch; see gather.h.
#include "zero/gather.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "zero/wire.h"

namespace gpt {

WeightGatherer::WeightGatherer(const Partition& partition, const std::vector<std::string>& unit_names,
                               comm::Communicator& dp, Precision precision, bool overlap, Arena& arena,
                               EventLog& events)
    : partition_(partition),
      names_(unit_names),
      dp_(dp),
      precision_(precision),
      element_bytes_(wire_bytes(precision)),
      overlap_(overlap),
      arena_(arena),
      events_(events) {}

WeightGatherer::~WeightGatherer() {
  for (Slot& slot : slots_) slot.request.wait();
  for (auto& [buffer, bytes] : free_buffers_) arena_.release(buffer);
  for (Slot& slot : slots_) {
    arena_.release(slot.wire);
    if (slot.weights != slot.wire) arena_.release(slot.weights);
  }
}

void WeightGatherer::begin_pass(std::vector<int> schedule, comm::Phase phase, const void* shard) {
  if (!idle()) throw std::logic_error("WeightGatherer: a pass began while units were still gathered");
  schedule_ = std::move(schedule);
  next_ = 0;
  phase_ = phase;
  shard_ = static_cast<const uint8_t*>(shard);
}

void* WeightGatherer::take_buffer(size_t bytes, const char* name) {
  auto best = free_buffers_.end();
  for (auto it = free_buffers_.begin(); it != free_buffers_.end(); ++it) {
    if (it->second >= bytes && (best == free_buffers_.end() || it->second < best->second)) best = it;
  }
  if (best == free_buffers_.end()) return arena_.allocate(name, "buffers", bytes);
  void* buffer = best->first;
  free_buffers_.erase(best);
  return buffer;
}

void WeightGatherer::give_buffer(void* buffer, size_t bytes) {
  free_buffers_.emplace_back(buffer, bytes);
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
  Slot slot;
  slot.unit = unit;
  slot.wire_bytes = size_t(u.padded) * element_bytes_;
  slot.wire = take_buffer(slot.wire_bytes, "gathered unit");
  if (precision_ == Precision::kFp32) {
    slot.weights = static_cast<float*>(slot.wire);
  } else {
    slot.weight_bytes = size_t(u.numel) * sizeof(float);
    slot.weights = static_cast<float*>(take_buffer(slot.weight_bytes, "widened unit"));
  }
  const uint8_t* own = shard_ + size_t(u.shard_offset) * element_bytes_;
  slot.request = dp_.all_gather(own, slot.wire, size_t(u.shard) * element_bytes_, phase_);
  slot.posted = true;
  events_.add(EngineEvent::Kind::kPostGather, names_[unit], phase_ == comm::Phase::kParamGatherBwd);
  slots_.push_back(std::move(slot));
}

const float* WeightGatherer::acquire(int unit) {
  if (next_ >= schedule_.size() || schedule_[next_] != unit) {
    throw std::logic_error("WeightGatherer: unit " + names_[unit] + " acquired out of schedule");
  }
  if (!slot_of(unit)) post(next_);
  if (overlap_ && next_ + 1 < schedule_.size() && !slot_of(schedule_[next_ + 1])) post(next_ + 1);
  ++next_;
  Slot* slot = slot_of(unit);
  slot->request.wait();
  events_.add(EngineEvent::Kind::kWaitGather, names_[unit], phase_ == comm::Phase::kParamGatherBwd);
  if (precision_ != Precision::kFp32)
    from_wire(precision_, slot->wire, slot->weights, partition_.unit(unit).numel);
  slot->acquired = true;
  return slot->weights;
}

void WeightGatherer::release(int unit) {
  for (auto it = slots_.begin(); it != slots_.end(); ++it) {
    if (it->unit != unit) continue;
    if (!it->acquired)
      throw std::logic_error("WeightGatherer: " + names_[unit] + " released before acquired");
    give_buffer(it->wire, it->wire_bytes);
    if (it->weights != it->wire) give_buffer(it->weights, it->weight_bytes);
    slots_.erase(it);
    return;
  }
  throw std::logic_error("WeightGatherer: " + names_[unit] + " released but not gathered");
}

bool WeightGatherer::idle() const {
  return slots_.empty();
}

}  // namespace gpt
