// The gradient sinks of the ZeRO stages; see gradient_sinks.h.
#include "zero/gradient_sinks.h"

#include <stdexcept>

#include "zero/reduce.h"

namespace gpt {

template <typename Real>
Real* EngineGradients<Real>::open(int unit) {
  open_[unit] = buffer_for(unit);
  return open_[unit];
}

template <typename Real>
void EngineGradients<Real>::ready(int unit) {
  if (hook_) hook_(unit, open_[unit], partition_.unit(unit).numel);
  hand_over(unit, open_[unit]);
  open_[unit] = nullptr;
}

namespace {

// "fp32 gradients" (or fp64), as the arena names them.
template <typename Real>
std::string gradients_name() {
  return std::string(precision_name(dtype_of<Real>())) + " gradients";
}

// Full gradients in Real (padded layout, device), accumulated in place over the micro-steps of a step.
template <typename Real>
class FullGradients : public EngineGradients<Real> {
 public:
  explicit FullGradients(const GradientSinkParts& p)
      : EngineGradients<Real>(p.partition), context_(p.context), dp_(p.dp), wire_(p.config.precision) {
    grad_ = static_cast<Real*>(context_.device.allocate(gradients_name<Real>(), "gradients",
                                                        partition_.padded_total() * sizeof(Real)));
  }
  void begin_step() override { context_.ops.fill(context_.view(grad_, partition_.padded_total(), kLoop), 0); }
  Real* shard() override { return grad_; }

 protected:
  static constexpr DType kLoop = dtype_of<Real>();
  using EngineGradients<Real>::partition_;
  Real* buffer_for(int unit) override { return grad_ + partition_.unit(unit).padded_offset; }
  void hand_over(int, Real*) override {}

  const EngineContext& context_;
  comm::Communicator& dp_;
  DType wire_;
  Real* grad_ = nullptr;
};

template <typename Real>
class AllReducedGradients final : public FullGradients<Real> {
  using Base = FullGradients<Real>;
  using Base::context_, Base::dp_, Base::grad_, Base::kLoop, Base::partition_, Base::wire_;

 public:
  using Base::Base;
  void end_step() override {
    const int64_t P = partition_.padded_total();
    // In the wire dtype, pre-divided by the world size: the sum over ranks is the mean.
    void* wire = context_.wire.allocate("gradients on the wire", "buffers: gradients on the wire",
                                        dtype_bytes(wire_, P));
    context_.ops.cast(context_.view(wire, P, wire_), context_.view(grad_, P, kLoop),
                      1.0f / float(dp_.size()));
    // One rank: the all-reduce would return its input (a sum of one, times 1); the casts stay, so the
    // gradients are rounded to the wire dtype as with more ranks.
    if (dp_.size() > 1) {
      context_.before_communication(dp_);
      dp_.all_reduce(wire, wire_, P, 1.0f, comm::Phase::kGradReduce).wait();
    }
    context_.ops.cast(context_.view(grad_, P, kLoop), context_.view(wire, P, wire_));
    context_.wire.release(wire);
  }
};

template <typename Real>
class ReduceScatteredGradients final : public FullGradients<Real> {
  using Base = FullGradients<Real>;
  using Base::context_, Base::dp_, Base::grad_, Base::kLoop, Base::partition_, Base::wire_;

 public:
  using Base::Base;
  // One reduce-scatter of the whole padded vector, rank-major by unit like the stage-2/3 buckets; the reduced
  // shard is kept at the front of the gradient buffer (the rank's shard layout), which the optimizer reads.
  void end_step() override {
    const int W = dp_.size();
    const int64_t S = partition_.shard_total(), P = partition_.padded_total();
    const size_t wb = dtype_size(wire_);
    uint8_t* send = static_cast<uint8_t*>(
        context_.wire.allocate("gradients rank-major", "buffers: reduce-scatter", P * wb));
    for (const UnitPartition& u : partition_.units()) {
      for (int p = 0; p < W; ++p) {
        // Rank p's piece of unit u, pre-divided by W (the sum over ranks is the mean), in the wire dtype.
        context_.ops.cast(context_.view(send + (size_t(p) * S + u.shard_offset) * wb, u.shard, wire_),
                          context_.view(grad_ + u.padded_offset + int64_t(p) * u.shard, u.shard, kLoop),
                          1.0f / float(W));
      }
    }
    if (W == 1) {
      // One rank: the reduce-scatter would write its input widened to the loop dtype (times 1).
      context_.ops.cast(context_.view(grad_, S, kLoop), context_.view(send, S, wire_));
    } else {
      Real* shard = static_cast<Real*>(
          context_.wire.allocate("reduced gradient shard", "buffers: reduce-scatter", S * sizeof(Real)));
      context_.before_communication(dp_);
      dp_.reduce_scatter(send, wire_, shard, S, 1.0f, comm::Phase::kGradReduce).wait();
      context_.ops.copy(context_.view(grad_, S, kLoop), context_.view(shard, S, kLoop));
      context_.wire.release(shard);
    }
    context_.wire.release(send);
  }
};

// Each unit's gradient of a micro-step lives in a pooled buffer from open to ready; the reducer packs it
// into its bucket at once, so the buffer is free again when ready returns.
template <typename Real>
class BucketedGradients final : public EngineGradients<Real> {
  static constexpr DType kLoop = dtype_of<Real>();
  using EngineGradients<Real>::partition_;

 public:
  explicit BucketedGradients(const GradientSinkParts& p)
      : EngineGradients<Real>(p.partition), context_(p.context) {
    grad_ = static_cast<Real*>(context_.device.allocate(gradients_name<Real>(), "gradients",
                                                        partition_.shard_total() * sizeof(Real)));
    const QgzGroups qgz{p.qgz_node, p.qgz_cross, QgzSettings::of(p.config)};
    reducer_ = std::make_unique<GradientReducer>(
        partition_, p.unit_names, p.gradient_order, p.dp, p.config.precision, p.config.reduce_bucket_size,
        p.config.overlap_comm, grad_, context_, p.qgz_node ? &qgz : nullptr);
  }
  ~BucketedGradients() override {
    for (const Buffer& b : buffers_) context_.device.release(b.data);
  }
  void begin_step() override { context_.ops.fill(context_.view(grad_, partition_.shard_total(), kLoop), 0); }
  void end_micro_step() override { reducer_->finish(); }
  Real* shard() override { return grad_; }
  bool take_local_finite() override { return reducer_->take_local_finite(); }
  LocoFeedback* error_feedback() override { return reducer_->error_feedback(); }

 protected:
  Real* buffer_for(int unit) override {
    // The unit's padded size, the padding zero: the reducer may reduce the buffer in place (reduce.h).
    const int64_t n = partition_.unit(unit).padded;
    Buffer* best = nullptr;  // the smallest free buffer that fits
    for (Buffer& b : buffers_) {
      if (!b.in_use && b.numel >= n && (!best || b.numel < best->numel)) best = &b;
    }
    if (!best) {
      void* data = context_.device.allocate("unit gradient", "buffers: unit gradients", n * sizeof(Real));
      buffers_.push_back({static_cast<Real*>(data), n, false});
      best = &buffers_.back();
    }
    best->in_use = true;
    context_.ops.fill(context_.view(best->data, n, kLoop), 0);
    return best->data;
  }
  void hand_over(int unit, Real* gradient) override {
    reducer_->add(unit, gradient);
    for (Buffer& b : buffers_) {
      if (b.data == gradient) b.in_use = false;
    }
  }

 private:
  struct Buffer {
    Real* data;
    int64_t numel;
    bool in_use;
  };
  const EngineContext& context_;
  Real* grad_ = nullptr;  // this rank's gradient shard
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<Buffer> buffers_;
};

}  // namespace

template <typename Real>
std::unique_ptr<EngineGradients<Real>> make_gradient_sink(const GradientSinkParts& parts) {
  require_loop_dtype(parts.config.precision, dtype_of<Real>());
  switch (parts.config.stage) {
    case 0:
      return std::make_unique<AllReducedGradients<Real>>(parts);
    case 1:
      return std::make_unique<ReduceScatteredGradients<Real>>(parts);
    case 2:
    case 3:
      return std::make_unique<BucketedGradients<Real>>(parts);
  }
  throw std::invalid_argument("ZeRO stage must be 0, 1, 2 or 3");
}

template class EngineGradients<float>;
template class EngineGradients<double>;
template std::unique_ptr<EngineGradients<float>> make_gradient_sink<float>(const GradientSinkParts&);
template std::unique_ptr<EngineGradients<double>> make_gradient_sink<double>(const GradientSinkParts&);

}  // namespace gpt
