// The weight sources of the ZeRO stages; see weight_sources.h.
#include "zero/weight_sources.h"

#include <stdexcept>
#include <type_traits>

#include "zero/gather.h"
#include "zero/offload_layout.h"
#include "zero/param_swap.h"

namespace gpt {

template <typename Real>
void EngineWeights<Real>::begin_pass(Pass pass, const std::vector<int>& schedule) {
  backward_ = pass == Pass::kBackward;
  start_pass(schedule, backward_ ? comm::Phase::kParamGatherBwd : forward_phase_);
}

template <typename Real>
void EngineWeights<Real>::begin_forward_ahead(const std::vector<int>&) {
  throw std::logic_error("only stage 3 gathers its weights, and so only it can begin a pass ahead");
}

template <typename Real>
void EngineWeights<Real>::refresh_rounded(const std::function<void()>&) {
  throw std::logic_error("this weight source has no rounding target for the optimizer to write");
}

template <typename Real>
WeightView EngineWeights<Real>::acquire(int unit) {
  const WeightView weights = fetch(unit);
  events_.add(EngineEvent::Kind::kComputeBegin, names_[unit], backward_);
  return weights;
}

namespace {

// Full compute weights on every rank (padded layout), on the device for the loop in its compute dtype (Real,
// or the compute weights' own fp16/bf16 in a half loop).
template <typename Real>
class ReplicatedWeights : public EngineWeights<Real> {
 public:
  // gathered: the compute weights arrive by all-gather, so they live in wire memory and always get a device
  // copy; otherwise they are computed on the device, which needs a copy only when the loop widens them.
  ReplicatedWeights(const WeightSourceParts& p, bool gathered)
      : EngineWeights<Real>(p.unit_names, p.context.events),
        context_(p.context),
        partition_(p.partition),
        dtype_(p.config.precision),
        loop_(p.half_loop ? dtype_ : kLoop) {
    const int64_t P = partition_.padded_total();
    Arena& home = gathered ? context_.wire : context_.device;
    compute_ = home.allocate("compute weights", "compute weights", dtype_bytes(dtype_, P));
    if (gathered || dtype_ != loop_) {
      widened_ = context_.device.allocate(std::string("compute weights in ") + precision_name(loop_),
                                          "buffers: widened compute weights", dtype_bytes(loop_, P));
    }
  }
  // Stage 0: the master is the whole padded vector.
  void refresh(const Real* master) override {
    const int64_t P = partition_.padded_total();
    context_.ops.cast(ReplicatedWeights::rounding_target(SubGroup{0, P, {}}),
                      context_.view(master, P, kLoop));
    widen();
  }
  // Stage 0: the compute weights' padded layout is the master's.
  Tensor rounding_target(const SubGroup& group) const override {
    return context_.view(static_cast<uint8_t*>(compute_) + dtype_bytes(dtype_, group.begin), group.size(),
                         dtype_);
  }
  void refresh_rounded(const std::function<void()>& round) override {
    round();
    widen();
  }
  void release(int) override {}

 protected:
  static constexpr DType kLoop = dtype_of<Real>();
  void start_pass(const std::vector<int>&, comm::Phase) override {}
  WeightView fetch(int unit) override {
    const int64_t offset = partition_.unit(unit).padded_offset;
    return widened_ ? WeightView(widened_, loop_) + offset : WeightView(compute_, dtype_) + offset;
  }
  void widen() {
    const int64_t P = partition_.padded_total();
    if (widened_) context_.ops.cast(context_.view(widened_, P, loop_), context_.view(compute_, P, dtype_));
  }

  const EngineContext& context_;
  const Partition& partition_;
  DType dtype_;              // of the compute weights
  DType loop_;               // of the weights the loop reads
  void* compute_ = nullptr;  // padded layout
  void* widened_ = nullptr;  // device copy of compute_ in loop_, when the loop cannot use compute_ itself
};

template <typename Real>
class RegatheredWeights final : public ReplicatedWeights<Real> {
  using Base = ReplicatedWeights<Real>;
  using Base::compute_, Base::context_, Base::dtype_, Base::kLoop, Base::partition_;

 public:
  explicit RegatheredWeights(const WeightSourceParts& p) : Base(p, true), dp_(p.dp) {}
  // The rounding lands in a shard to all-gather, not in the compute weights.
  Tensor rounding_target(const SubGroup&) const override { return {}; }
  // Round this rank's updated shard, then all-gather every rank's, unit by unit, into the padded layout.
  void refresh(const Real* master) override {
    const int64_t S = partition_.shard_total();
    const size_t cb = dtype_size(dtype_);
    if (dp_.size() == 1) return refresh_alone(master, cb);
    void* shard = context_.wire.allocate("compute-weight shard", "buffers: compute-weight shard", S * cb);
    context_.ops.cast(context_.view(shard, S, dtype_), context_.view(master, S, kLoop));
    context_.before_communication(dp_);
    for (const UnitPartition& u : partition_.units()) {
      dp_.all_gather(static_cast<uint8_t*>(shard) + u.shard_offset * cb,
                     static_cast<uint8_t*>(compute_) + u.padded_offset * cb, u.shard * cb,
                     comm::Phase::kParamGatherFwd)
          .wait();
    }
    context_.wire.release(shard);
    Base::widen();
  }

 private:
  // One rank: each unit's shard is the whole unit; it is rounded straight into its place in the padded
  // layout, where the gather would have copied it.
  void refresh_alone(const Real* master, size_t cb) {
    for (const UnitPartition& u : partition_.units()) {
      context_.ops.cast(
          context_.view(static_cast<uint8_t*>(compute_) + u.padded_offset * cb, u.shard, dtype_),
          context_.view(master + u.shard_offset, u.shard, kLoop));
    }
    Base::widen();
  }

  comm::Communicator& dp_;
};

// Where stage 3's compute-weight shard lives, chosen once: resident in wire memory (it is what a gather
// sends), or on NVMe with offload_param "nvme" (ParamSwap). Either takes the master a sub-group at a time.
template <typename Real>
class ShardHome {
 public:
  virtual ~ShardHome() = default;
  // Rounds the group's master values (master: the group's first) into the shard.
  virtual void write(const Real* master, const SubGroup& group) = 0;
  // The same for the whole master (flat shard layout).
  virtual void write_all(const Real* master) = 0;
  // Where write() rounds the group into, when that is the shard itself (EngineWeights::rounding_target).
  virtual Tensor rounding_target(const SubGroup& group) const { return {}; }
  // Every write has landed where the next gather reads it.
  virtual void finish() {}
  // The resident shard for the gatherer; null when the gatherer reads the shards from swap().
  virtual const void* shard() const { return nullptr; }
  virtual ParamSwap* swap() { return nullptr; }
};

template <typename Real>
class ResidentShard final : public ShardHome<Real> {
 public:
  explicit ResidentShard(const WeightSourceParts& p)
      : context_(p.context), dtype_(p.config.precision), total_(p.partition.shard_total()) {
    shard_ = context_.wire.allocate("compute weights", "compute weights", dtype_bytes(dtype_, total_));
  }
  void write(const Real* master, const SubGroup& group) override {
    context_.ops.cast(rounding_target(group), context_.view(master, group.size(), dtype_of<Real>()));
  }
  void write_all(const Real* master) override { write(master, SubGroup{0, total_, {}}); }
  Tensor rounding_target(const SubGroup& group) const override {
    return context_.view(static_cast<uint8_t*>(shard_) + dtype_bytes(dtype_, group.begin), group.size(),
                         dtype_);
  }
  const void* shard() const override { return shard_; }

 private:
  const EngineContext& context_;
  DType dtype_;
  int64_t total_;
  void* shard_ = nullptr;
};

// Written back by sub-groups through ParamSwap's staging buffers (the loop is fp32).
class SwappedShard final : public ShardHome<float> {
 public:
  SwappedShard(OffloadStore& store, DType precision) : swap_(store, precision), layout_(store.layout()) {}
  void write(const float* master, const SubGroup& group) override { swap_.write_group(master, group); }
  void write_all(const float* master) override {
    for (const SubGroup& group : layout_.sub_groups) write(master + group.begin, group);
  }
  void finish() override { swap_.finish_writes(); }
  ParamSwap* swap() override { return &swap_; }

 private:
  ParamSwap swap_;
  const OffloadLayout& layout_;
};

template <typename Real>
std::unique_ptr<ShardHome<Real>> make_shard_home(const WeightSourceParts& p) {
  if (!p.config.offload.param_on_nvme()) return std::make_unique<ResidentShard<Real>>(p);
  if constexpr (std::is_same_v<Real, float>) {
    return std::make_unique<SwappedShard>(*p.offload, p.config.precision);
  } else {
    throw std::invalid_argument("offload_param needs an fp32 loop");
  }
}

template <typename Real>
class GatheredWeights final : public EngineWeights<Real>, public SubGroupRefresh<Real> {
 public:
  explicit GatheredWeights(const WeightSourceParts& p)
      : EngineWeights<Real>(p.unit_names, p.context.events), home_(make_shard_home<Real>(p)) {
    gatherer_ =
        std::make_unique<WeightGatherer>(p.partition, p.unit_names, p.dp, p.hpz_group, p.config, p.context,
                                         home_->swap(), p.node_group, p.cross_group, p.half_loop);
  }
  void refresh(const Real* master) override {
    refresh_begin();
    home_->write_all(master);
    refresh_done();
  }
  Tensor rounding_target(const SubGroup& group) const override { return home_->rounding_target(group); }
  void refresh_rounded(const std::function<void()>& round) override {
    refresh_begin();
    round();
    refresh_done();
  }
  SubGroupRefresh<Real>* by_sub_group() override { return this; }
  // hpZ copies and quantized shards never outlive a weight change.
  void refresh_begin() override { gatherer_->weights_changed(); }
  void refresh_group(const Real* master, const SubGroup& group) override { home_->write(master, group); }
  void refresh_done() override { home_->finish(); }
  size_t secondary_peak_bytes() const override { return gatherer_->secondary_bytes_peak(); }
  void begin_forward_ahead(const std::vector<int>& schedule) override {
    gatherer_->begin_pass_ahead(schedule, comm::Phase::kParamGatherFwd, home_->shard());
  }
  void finish_forward_ahead() override { gatherer_->finish_ahead(); }
  void release(int unit) override { gatherer_->release(unit); }

 protected:
  void start_pass(const std::vector<int>& schedule, comm::Phase phase) override {
    gatherer_->begin_pass(schedule, phase, home_->shard());
  }
  WeightView fetch(int unit) override { return gatherer_->acquire(unit); }

 private:
  std::unique_ptr<ShardHome<Real>> home_;
  std::unique_ptr<WeightGatherer> gatherer_;
};

}  // namespace

template <typename Real>
std::unique_ptr<EngineWeights<Real>> make_weight_source(const WeightSourceParts& parts) {
  require_loop_dtype(parts.config.precision, dtype_of<Real>());
  switch (parts.config.stage) {
    case 0:
      return std::make_unique<ReplicatedWeights<Real>>(parts, false);
    case 1:
    case 2:
      return std::make_unique<RegatheredWeights<Real>>(parts);
    case 3:
      return std::make_unique<GatheredWeights<Real>>(parts);
  }
  throw std::invalid_argument("ZeRO stage must be 0, 1, 2 or 3");
}

template class EngineWeights<float>;
template class EngineWeights<double>;
template std::unique_ptr<EngineWeights<float>> make_weight_source<float>(const WeightSourceParts&);
template std::unique_ptr<EngineWeights<double>> make_weight_source<double>(const WeightSourceParts&);

}  // namespace gpt
