// The weight sources of the ZeRO stages; see weight_sources.h.
#include "zero/weight_sources.h"

#include <stdexcept>

#include "zero/gather.h"
#include "zero/wire.h"

namespace gpt {

void EngineWeights::begin_pass(Pass pass, const std::vector<int>& schedule) {
  backward_ = pass == Pass::kBackward;
  start_pass(schedule, backward_ ? comm::Phase::kParamGatherBwd : forward_phase_);
}

const float* EngineWeights::acquire(int unit) {
  const float* weights = fetch(unit);
  events_.add(EngineEvent::Kind::kComputeBegin, names_[unit], backward_);
  return weights;
}

namespace {

// Full compute weights on every rank (padded layout), widened to fp32 for the loop when they are 16-bit.
class ReplicatedWeights : public EngineWeights {
 public:
  explicit ReplicatedWeights(const WeightSourceParts& p)
      : EngineWeights(p.unit_names, p.events), partition_(p.partition), precision_(p.config.precision) {
    const int64_t P = partition_.padded_total();
    compute_ = p.arena.allocate("compute weights", "compute weights", P * wire_bytes(precision_));
    if (precision_ != Precision::kFp32) {
      widened_ = static_cast<float*>(
          p.arena.allocate("compute weights widened to fp32", "buffers", P * sizeof(float)));
    }
  }
  // Stage 0: the master is the whole padded vector.
  void refresh(const float* master) override {
    to_wire(precision_, master, compute_, partition_.padded_total());
    widen();
  }
  void release(int) override {}

 protected:
  void start_pass(const std::vector<int>&, comm::Phase) override {}
  const float* fetch(int unit) override {
    const int64_t offset = partition_.unit(unit).padded_offset;
    return widened_ ? widened_ + offset : static_cast<const float*>(compute_) + offset;
  }
  void widen() {
    if (widened_) from_wire(precision_, compute_, widened_, partition_.padded_total());
  }

  const Partition& partition_;
  Precision precision_;
  void* compute_ = nullptr;   // compute dtype, padded layout
  float* widened_ = nullptr;  // fp32 copy of compute_ when that is fp16/bf16
};

class RegatheredWeights final : public ReplicatedWeights {
 public:
  explicit RegatheredWeights(const WeightSourceParts& p) : ReplicatedWeights(p), dp_(p.dp) {}
  // Round this rank's updated shard, then all-gather every rank's, unit by unit, into the padded layout.
  void refresh(const float* master) override {
    const size_t cb = wire_bytes(precision_);
    std::vector<uint8_t> shard(partition_.shard_total() * cb);
    to_wire(precision_, master, shard.data(), partition_.shard_total());
    for (const UnitPartition& u : partition_.units()) {
      dp_.all_gather(shard.data() + u.shard_offset * cb,
                     static_cast<uint8_t*>(compute_) + u.padded_offset * cb, u.shard * cb,
                     comm::Phase::kParamGatherFwd)
          .wait();
    }
    widen();
  }

 private:
  comm::Communicator& dp_;
};

class GatheredWeights final : public EngineWeights {
 public:
  explicit GatheredWeights(const WeightSourceParts& p)
      : EngineWeights(p.unit_names, p.events), partition_(p.partition), precision_(p.config.precision) {
    shard_ = p.arena.allocate("compute weights", "compute weights",
                              partition_.shard_total() * wire_bytes(precision_));
    gatherer_ = std::make_unique<WeightGatherer>(partition_, p.unit_names, p.dp, p.hpz_group, p.config,
                                                 p.arena, p.events);
  }
  void refresh(const float* master) override {
    to_wire(precision_, master, shard_, partition_.shard_total());
    gatherer_->drop_secondaries();  // hpZ copies never outlive a weight change
  }
  size_t secondary_peak_bytes() const override { return gatherer_->secondary_bytes_peak(); }
  void release(int unit) override { gatherer_->release(unit); }

 protected:
  void start_pass(const std::vector<int>& schedule, comm::Phase phase) override {
    gatherer_->begin_pass(schedule, phase, shard_);
  }
  const float* fetch(int unit) override { return gatherer_->acquire(unit); }

 private:
  const Partition& partition_;
  Precision precision_;
  void* shard_ = nullptr;  // this rank's compute-weight shard (compute dtype)
  std::unique_ptr<WeightGatherer> gatherer_;
};

}  // namespace

std::unique_ptr<EngineWeights> make_weight_source(const WeightSourceParts& parts) {
  switch (parts.config.stage) {
    case 0:
      return std::make_unique<ReplicatedWeights>(parts);
    case 1:
    case 2:
      return std::make_unique<RegatheredWeights>(parts);
    case 3:
      return std::make_unique<GatheredWeights>(parts);
  }
  throw std::invalid_argument("ZeRO stage must be 0, 1, 2 or 3");
}

}  // namespace gpt
