// GradientReducer: bucketed, rank-major packing, reduced by the ring or by qgZ; see reduce.h.
#include "zero/reduce.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

namespace gpt {

std::vector<std::vector<int>> plan_buckets(const Partition& partition, const std::vector<int>& backward_order,
                                           int64_t bucket_size) {
  std::vector<std::vector<int>> buckets;
  int64_t filled = 0;
  for (int unit : backward_order) {
    const int64_t n = partition.unit(unit).numel;
    if (buckets.empty() || filled + n > bucket_size) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(unit);
    filled += n;
  }
  return buckets;
}

std::vector<std::vector<int>> plan_buckets(const Partition& partition,
                                           const std::vector<std::vector<int>>& backward_segments,
                                           int64_t bucket_size) {
  std::vector<std::vector<int>> buckets;
  for (const std::vector<int>& segment : backward_segments) {
    std::vector<std::vector<int>> mine = plan_buckets(partition, segment, bucket_size);
    buckets.insert(buckets.end(), mine.begin(), mine.end());
  }
  return buckets;
}

namespace {

// The ring: the bucket travels in the wire dtype, pre-divided by W, and one reduce-scatter sums it.
class RingReduction final : public BucketReduction {
 public:
  RingReduction(comm::Communicator& dp, DType precision, DType accumulation, const EngineContext& context)
      : dp_(dp), precision_(precision), accumulation_(accumulation), context_(context) {}
  DType send_dtype() const override { return precision_; }
  void pack(const Tensor& dst, const Tensor& part) override {
    context_.ops.cast(dst, part, 1.0f / float(dp_.size()));  // pre-divided: the sum over ranks is the mean
  }
  std::unique_ptr<InFlight> post(int, const void* send, void* recv, int64_t chunk) override {
    auto flight = std::make_unique<Ring>();
    if (dp_.size() == 1) {
      // One rank: the reduce-scatter would write its input widened to the accumulation dtype (times 1); the
      // request stays complete.
      context_.ops.cast(context_.view(recv, chunk, accumulation_), context_.view(send, chunk, precision_));
    } else {
      context_.before_communication(dp_);
      flight->request =
          dp_.reduce_scatter(send, precision_, recv, size_t(chunk), 1.0f, comm::Phase::kGradReduce);
    }
    return flight;
  }
  void advance(int, InFlight&) override {}  // one hop, already posted
  void wait(int, InFlight& flight, void*) override { static_cast<Ring&>(flight).request.wait(); }
  void abandon(InFlight& flight) override { static_cast<Ring&>(flight).request.wait(); }

 private:
  struct Ring : InFlight {
    comm::Request request;
  };
  comm::Communicator& dp_;
  DType precision_, accumulation_;
  const EngineContext& context_;
};

// qgZ: the bucket travels as fp32 (qgZ quantizes it itself and divides by W at the end). A bucket's slow
// cross-node hop is posted when a later bucket is, so it runs during that bucket's backward.
class QgzReduction final : public BucketReduction {
 public:
  QgzReduction(const QgzGroups& groups, const std::vector<int64_t>& chunks, int world,
               const EngineContext& context)
      : node_(*groups.node), cross_(*groups.cross), settings_(groups.settings), context_(context) {
    if (settings_.feedback) {
      feedback_ = std::make_unique<LocoFeedback>(context, chunks, world, cross_.size(), node_.size(),
                                                 settings_.block);
    }
  }
  DType send_dtype() const override { return DType::kF32; }
  void pack(const Tensor& dst, const Tensor& part) override { context_.ops.copy(dst, part); }
  bool done_with_send_at_post() const override { return true; }  // qgz_start quantizes it whole
  std::unique_ptr<InFlight> post(int bucket, const void* send, void*, int64_t chunk) override {
    auto flight = std::make_unique<Qgz>();
    bool finite = true;  // qgz_start synchronizes before its exchange
    qgz_start(context_, node_, cross_, static_cast<const float*>(send), chunk, settings_, kept(bucket),
              flight->exchange, &finite, comm::Phase::kGradReduce);
    local_finite_ = local_finite_ && finite;
    return flight;
  }
  void advance(int bucket, InFlight& flight) override {
    QgzExchange& exchange = static_cast<Qgz&>(flight).exchange;
    if (exchange.crossed) return;
    const comm::OperationLabel serving("bucket " + std::to_string(bucket) + " (qgZ's cross-node hop)");
    qgz_cross(context_, node_, cross_, settings_, kept(bucket), exchange, comm::Phase::kGradReduce);
  }
  void wait(int bucket, InFlight& flight, void* recv) override {
    const comm::OperationLabel serving("bucket " + std::to_string(bucket) + " (qgZ's cross-node hop)");
    qgz_finish(context_, node_, cross_, settings_, kept(bucket), static_cast<Qgz&>(flight).exchange,
               static_cast<float*>(recv), comm::Phase::kGradReduce);
  }
  void abandon(InFlight& flight) override {
    QgzExchange& exchange = static_cast<Qgz&>(flight).exchange;
    exchange.request.wait();
    exchange.release();
  }
  bool take_local_finite() override {
    const bool finite = local_finite_;
    local_finite_ = true;
    return finite;
  }
  LocoFeedback* error_feedback() override { return feedback_.get(); }

 private:
  struct Qgz : InFlight {
    QgzExchange exchange;
  };
  QgzFeedback kept(int bucket) const { return feedback_ ? feedback_->of(bucket) : QgzFeedback{}; }

  comm::Communicator& node_;
  comm::Communicator& cross_;
  QgzSettings settings_;
  const EngineContext& context_;
  std::unique_ptr<LocoFeedback> feedback_;  // with zeropp_loco_param
  bool local_finite_ = true;
};

}  // namespace

GradientReducer::GradientReducer(const Partition& partition, const std::vector<std::string>& unit_names,
                                 const std::vector<std::vector<int>>& backward_segments,
                                 comm::Communicator& dp, DType precision, int64_t bucket_size, bool overlap,
                                 void* grad_shard, const EngineContext& context, const QgzGroups* qgz)
    : partition_(partition),
      names_(unit_names),
      accumulation_(loop_dtype(precision)),
      overlap_(overlap),
      grad_shard_(grad_shard),
      context_(context),
      ops_(context.ops),
      events_(context.events),
      buckets_(plan_buckets(partition, backward_segments, bucket_size)),
      bucket_of_unit_(partition.units().size(), -1),
      segments_(backward_segments),
      segment_of_unit_(partition.units().size(), -1) {
  for (size_t s = 0; s < segments_.size(); ++s) {
    for (int unit : segments_[s]) segment_of_unit_[size_t(unit)] = int(s);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t shard_elements = 0;
    for (int unit : buckets_[b]) {
      bucket_of_unit_[unit] = int(b);
      shard_elements += partition.unit(unit).shard;
    }
    bucket_shard_elements_.push_back(shard_elements);
  }
  if (!qgz) {
    reduction_ = std::make_unique<RingReduction>(dp, precision, accumulation_, context);
    return;
  }
  if (accumulation_ != DType::kF32)
    throw std::invalid_argument("qgZ quantizes fp32 gradients; the wire dtype is " +
                                std::string(dtype_name(precision)));
  reduction_ = std::make_unique<QgzReduction>(*qgz, bucket_shard_elements_, partition.num_shards(), context);
}

GradientReducer::~GradientReducer() {
  for (Pending& p : pending_) {
    reduction_->abandon(*p.flight);
    context_.wire.release(p.send);
    context_.wire.release(p.recv);
  }
  context_.wire.release(current_send_);
}

void GradientReducer::add(int unit, const void* grad) {
  if (segment_ < 0 && next_ == 0) segment_ = segment_of_unit_[size_t(unit)];  // the micro-step's segment
  if (segment_ < 0 || next_ >= segments_[size_t(segment_)].size() ||
      segments_[size_t(segment_)][next_] != unit) {
    throw std::logic_error("GradientReducer: unit " + names_[unit] + " arrived out of backward order");
  }
  ++next_;
  const int bucket = bucket_of_unit_[unit];
  if (reduces_in_place(bucket)) return post(bucket, grad);
  const DType send_dtype = reduction_->send_dtype();
  const size_t elem = dtype_size(send_dtype), grad_elem = dtype_size(accumulation_);
  if (units_in_current_ == 0) {
    const size_t bytes = size_t(bucket_shard_elements_[bucket]) * partition_.num_shards() * elem;
    current_send_ = context_.wire.allocate("gradient bucket (send)", "buffers: gradient buckets", bytes);
  }
  const std::vector<int>& units = buckets_[bucket];
  // Rank-major packing: rank p's part of the bucket is [shard p of each unit, in bucket order].
  int64_t offset_in_rank_part = 0;
  for (size_t i = 0; i < units_in_current_; ++i) offset_in_rank_part += partition_.unit(units[i]).shard;
  const UnitPartition& u = partition_.unit(unit);
  uint8_t* send = static_cast<uint8_t*>(current_send_);
  // Two views moved from rank to rank: a dry run's world can have a million ranks.
  Tensor dst = context_.view(send, 0, send_dtype), part = context_.view(grad, 0, accumulation_);
  // Ranks past the unit's last element hold padding only (a small unit over many ranks): nothing to pack.
  for (int p = 0; p < partition_.num_shards() && int64_t(p) * u.shard < u.numel; ++p) {
    const int64_t first = int64_t(p) * u.shard;
    const int64_t real = std::min<int64_t>(u.shard, u.numel - first);
    // The padding stays zero (arena blocks come zero-filled).
    dst.data = send + (size_t(p) * bucket_shard_elements_[bucket] + offset_in_rank_part) * elem;
    part.data = const_cast<uint8_t*>(static_cast<const uint8_t*>(grad) + size_t(first) * grad_elem);
    dst.shape[0] = part.shape[0] = real;
    reduction_->pack(dst, part);
  }
  if (++units_in_current_ == units.size()) {
    units_in_current_ = 0;
    post(bucket, current_send_);
  }
}

bool GradientReducer::reduces_in_place(int bucket) const {
  // Saves the pack's copy of the whole gradient and the send buffer (qgZ: P fp32 values a micro-step).
  return buckets_[bucket].size() == 1 && reduction_->done_with_send_at_post() &&
         reduction_->send_dtype() == accumulation_;
}

void GradientReducer::post(int bucket, const void* send) {
  Pending p;
  p.bucket = bucket;
  p.send = current_send_;  // null when send is the unit's gradient (no bucket is open then)
  p.recv = context_.wire.allocate("gradient bucket (result)", "buffers: gradient buckets",
                                  dtype_bytes(accumulation_, bucket_shard_elements_[bucket]));
  current_send_ = nullptr;
  std::string label = "bucket " + std::to_string(bucket) + ": " + names_[buckets_[bucket].front()];
  if (buckets_[bucket].size() > 1) label += ".." + names_[buckets_[bucket].back()];
  const comm::OperationLabel serving(label);  // for the watchdog's message
  p.flight = reduction_->post(bucket, send, p.recv, bucket_shard_elements_[bucket]);
  events_.add(EngineEvent::Kind::kPostReduce, label, true);
  pending_.push_back(std::move(p));
  // qgZ: the earlier buckets' intra-node hops have had a bucket of backward to finish; their cross-node hops
  // start now and run while backward computes the next bucket.
  for (size_t i = 0; i + 1 < pending_.size(); ++i)
    reduction_->advance(pending_[i].bucket, *pending_[i].flight);
  // Without overlap every reduction is waited for at once; with it, at most two are in flight.
  const size_t max_in_flight = overlap_ ? 2 : 0;
  while (pending_.size() > max_in_flight) complete_oldest();
}

void GradientReducer::complete_oldest() {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  reduction_->wait(p.bucket, *p.flight, p.recv);
  events_.add(EngineEvent::Kind::kWaitReduce, "bucket " + std::to_string(p.bucket), true);
  const size_t elem = dtype_size(accumulation_);
  int64_t offset = 0;
  for (int unit : buckets_[p.bucket]) {
    const UnitPartition& u = partition_.unit(unit);
    ops_.add_into(
        context_.view(static_cast<uint8_t*>(grad_shard_) + size_t(u.shard_offset) * elem, u.shard,
                      accumulation_),
        context_.view(static_cast<uint8_t*>(p.recv) + size_t(offset) * elem, u.shard, accumulation_));
    offset += u.shard;
  }
  context_.wire.release(p.send);
  context_.wire.release(p.recv);
}

void GradientReducer::finish() {
  // Every cross-node hop in flight before waiting for the first.
  for (Pending& p : pending_) reduction_->advance(p.bucket, *p.flight);
  while (!pending_.empty()) complete_oldest();
  if (segment_ < 0 || next_ != segments_[size_t(segment_)].size()) {
    throw std::logic_error("GradientReducer: finish() before every unit's gradient was added");
  }
  segment_ = -1;
  next_ = 0;
}

}  // namespace gpt
