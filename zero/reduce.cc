// GradientReducer: bucketed, rank-major packing and ring reduce-scatter of gradients; see reduce.h.
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

GradientReducer::GradientReducer(const Partition& partition, const std::vector<std::string>& unit_names,
                                 const std::vector<int>& backward_order, comm::Communicator& dp,
                                 DType precision, int64_t bucket_size, bool overlap, void* grad_shard,
                                 const EngineContext& context)
    : partition_(partition),
      names_(unit_names),
      dp_(dp),
      precision_(precision),
      accumulation_(loop_dtype(precision)),
      overlap_(overlap),
      grad_shard_(grad_shard),
      context_(context),
      ops_(context.ops),
      events_(context.events),
      buckets_(plan_buckets(partition, backward_order, bucket_size)),
      bucket_of_unit_(partition.units().size(), -1),
      backward_order_(backward_order) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t shard_elements = 0;
    for (int unit : buckets_[b]) {
      bucket_of_unit_[unit] = int(b);
      shard_elements += partition.unit(unit).shard;
    }
    bucket_shard_elements_.push_back(shard_elements);
  }
}

GradientReducer::~GradientReducer() {
  for (Pending& p : pending_) {
    p.request.wait();
    p.qgz.request.wait();
    p.qgz.release();
    context_.wire.release(p.send);
    context_.wire.release(p.recv);
  }
  context_.wire.release(current_send_);
}

void GradientReducer::use_quantized_gradients(comm::Communicator* node, comm::Communicator* cross,
                                              const QgzSettings& settings) {
  if (accumulation_ != DType::kF32)
    throw std::invalid_argument("qgZ quantizes fp32 gradients; the wire dtype is " +
                                std::string(dtype_name(precision_)));
  qgz_node_ = node;
  qgz_cross_ = cross;
  qgz_ = settings;
  if (!settings.feedback) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto [intra, inter] = feedback_sizes(int(b));
    const std::string name = "qgZ kept errors, bucket " + std::to_string(b);
    // Arena blocks come zero-filled: no error kept yet.
    feedback_.push_back(
        {static_cast<uint8_t*>(context_.device.allocate(name + " (hop 1)", kFeedbackCategory, intra)),
         static_cast<uint8_t*>(context_.device.allocate(name + " (hop 2)", kFeedbackCategory, inter))});
  }
}

std::pair<size_t, size_t> GradientReducer::feedback_sizes(int bucket) const {
  const int64_t chunk = bucket_shard_elements_[bucket];
  return {qgz_intra_feedback_bytes(chunk, partition_.num_shards(), qgz_.block),
          qgz_cross_feedback_bytes(chunk, qgz_cross_->size(), qgz_.block)};
}

size_t GradientReducer::feedback_bytes() const {
  size_t total = 0;
  for (size_t b = 0; b < feedback_.size(); ++b) {
    const auto [intra, inter] = feedback_sizes(int(b));
    total += intra + inter;
  }
  return total;
}

void GradientReducer::for_each_feedback(const std::function<void(const Tensor&, size_t)>& visit) const {
  size_t at = 0;
  for (size_t b = 0; b < feedback_.size(); ++b) {
    const auto [intra, inter] = feedback_sizes(int(b));
    visit(context_.view(feedback_[b].intra, int64_t(intra), DType::kI8), at);
    visit(context_.view(feedback_[b].cross, int64_t(inter), DType::kI8), at + intra);
    at += intra + inter;
  }
}

std::string GradientReducer::feedback_layout() const {
  if (feedback_.empty()) return "";
  std::string layout = "block " + std::to_string(qgz_.block) + ", " + std::to_string(qgz_cross_->size()) +
                       " nodes of " + std::to_string(qgz_node_->size()) + " ranks, chunks";
  for (int64_t chunk : bucket_shard_elements_) layout += " " + std::to_string(chunk);
  return layout;
}

std::vector<uint8_t> GradientReducer::download_feedback() const {
  std::vector<uint8_t> host(feedback_bytes());
  for_each_feedback([&](const Tensor& kept, size_t at) { ops_.download(host.data() + at, kept); });
  return host;
}

void GradientReducer::upload_feedback(const std::vector<uint8_t>& bytes) {
  if (bytes.size() != feedback_bytes()) {
    throw std::invalid_argument("GradientReducer: " + std::to_string(bytes.size()) +
                                " bytes of kept errors for buffers of " + std::to_string(feedback_bytes()));
  }
  for_each_feedback([&](const Tensor& kept, size_t at) { ops_.upload(kept, bytes.data() + at); });
}

void GradientReducer::reset_feedback() {
  if (!feedback_.empty()) upload_feedback(std::vector<uint8_t>(feedback_bytes(), 0));
}

bool GradientReducer::take_local_finite() {
  const bool finite = local_finite_;
  local_finite_ = true;
  return finite;
}

void GradientReducer::add(int unit, const void* grad) {
  if (next_ >= backward_order_.size() || backward_order_[next_] != unit) {
    throw std::logic_error("GradientReducer: unit " + names_[unit] + " arrived out of backward order");
  }
  ++next_;
  const int bucket = bucket_of_unit_[unit];
  // qgZ quantizes the fp32 gradients itself; the ring sends them in the wire dtype.
  const size_t elem = qgz_node_ ? sizeof(float) : dtype_size(precision_);
  const size_t grad_elem = dtype_size(accumulation_);
  if (units_in_current_ == 0) {
    current_send_bytes_ = size_t(bucket_shard_elements_[bucket]) * partition_.num_shards() * elem;
    current_send_ =
        context_.wire.allocate("gradient bucket (send)", "buffers: gradient buckets", current_send_bytes_);
  }
  const std::vector<int>& units = buckets_[bucket];
  // Rank-major packing: rank p's part of the bucket is [shard p of each unit, in bucket order].
  int64_t offset_in_rank_part = 0;
  for (size_t i = 0; i < units_in_current_; ++i) offset_in_rank_part += partition_.unit(units[i]).shard;
  const UnitPartition& u = partition_.unit(unit);
  uint8_t* send = static_cast<uint8_t*>(current_send_);
  for (int p = 0; p < partition_.num_shards(); ++p) {
    const int64_t first = std::min<int64_t>(int64_t(p) * u.shard, u.numel);
    const int64_t real = std::min<int64_t>(u.shard, u.numel - first);
    uint8_t* dst = send + (size_t(p) * bucket_shard_elements_[bucket] + offset_in_rank_part) * elem;
    // The padding stays zero (arena blocks come zero-filled).
    const Tensor part =
        context_.view(static_cast<const uint8_t*>(grad) + size_t(first) * grad_elem, real, accumulation_);
    if (qgz_node_) {
      ops_.copy(context_.view(dst, real, DType::kF32), part);  // qgZ divides by W at the end
    } else {
      // Pre-divided: the sum over ranks is the mean.
      ops_.cast(context_.view(dst, real, precision_), part, 1.0f / float(dp_.size()));
    }
  }
  if (++units_in_current_ == units.size()) {
    units_in_current_ = 0;
    post(bucket);
  }
}

void GradientReducer::post(int bucket) {
  Pending p;
  p.bucket = bucket;
  p.send = current_send_;
  p.send_bytes = current_send_bytes_;
  p.recv_bytes = dtype_bytes(accumulation_, bucket_shard_elements_[bucket]);
  p.recv = context_.wire.allocate("gradient bucket (result)", "buffers: gradient buckets", p.recv_bytes);
  current_send_ = nullptr;
  const int64_t chunk = bucket_shard_elements_[bucket];
  std::string label = "bucket " + std::to_string(bucket) + ": " + names_[buckets_[bucket].front()];
  if (buckets_[bucket].size() > 1) label += ".." + names_[buckets_[bucket].back()];
  const comm::OperationLabel serving(label);  // for the watchdog's message
  if (qgz_node_) {                            // qgz_start synchronizes before its exchange
    bool finite = true;
    qgz_start(context_, *qgz_node_, *qgz_cross_, static_cast<const float*>(p.send), chunk, qgz_,
              feedback_of(bucket), p.qgz, &finite, comm::Phase::kGradReduce);
    local_finite_ = local_finite_ && finite;
  } else if (dp_.size() == 1) {
    // One rank: the reduce-scatter would write its input widened to the accumulation dtype (times 1); the
    // request stays complete.
    ops_.cast(context_.view(p.recv, chunk, accumulation_), context_.view(p.send, chunk, precision_));
  } else {
    context_.before_communication(dp_);
    p.request = dp_.reduce_scatter(p.send, precision_, p.recv, size_t(chunk), 1.0f, comm::Phase::kGradReduce);
  }
  events_.add(EngineEvent::Kind::kPostReduce, label, true);
  pending_.push_back(std::move(p));
  // qgZ: the earlier buckets' intra-node hops have had a bucket of backward to finish; their cross-node hops
  // start now and run while backward computes the next bucket.
  for (size_t i = 0; i + 1 < pending_.size(); ++i) cross_nodes(pending_[i]);
  // Without overlap every reduction is waited for at once; with it, at most two are in flight.
  const size_t max_in_flight = overlap_ ? 2 : 0;
  while (pending_.size() > max_in_flight) complete_oldest();
}

void GradientReducer::cross_nodes(Pending& p) {
  if (!qgz_node_ || p.qgz.crossed) return;
  const comm::OperationLabel serving("bucket " + std::to_string(p.bucket) + " (qgZ's cross-node hop)");
  qgz_cross(context_, *qgz_node_, *qgz_cross_, qgz_, feedback_of(p.bucket), p.qgz, comm::Phase::kGradReduce);
}

void GradientReducer::complete_oldest() {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (qgz_node_) {
    const comm::OperationLabel serving("bucket " + std::to_string(p.bucket) + " (qgZ's cross-node hop)");
    qgz_finish(context_, *qgz_node_, *qgz_cross_, qgz_, feedback_of(p.bucket), p.qgz,
               static_cast<float*>(p.recv), comm::Phase::kGradReduce);
  } else {
    p.request.wait();
  }
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
  for (Pending& p : pending_) cross_nodes(p);  // every cross-node hop in flight before waiting for the first
  while (!pending_.empty()) complete_oldest();
  if (next_ != backward_order_.size()) {
    throw std::logic_error("GradientReducer: finish() before every unit's gradient was added");
  }
  next_ = 0;
}

}  // namespace gpt
