// Gradient reduction for ZeRO stages 2 and 3, on every micro-step. Each unit's full gradient (fp32, from its
// backward) is rounded to the wire dtype into the current bucket's send buffer, laid out rank-major, so that
// one ring reduce-scatter gives every rank its shard of every unit in the bucket, as the mean over ranks. A
// bucket holds whole units in backward order and closes before a unit that would take it past
// reduce_bucket_size elements; a larger unit is a bucket of its own. Finished reductions are added in fp32
// into the rank's gradient shard. (The double-precision gradient checks run the same path with fp64
// gradients, an fp64 wire and fp64 sums.) With overlap_comm a bucket's reduction runs while backward goes on
// (at most two in flight); without, each bucket is reduced and waited for as soon as it closes.
//
// With qgZ (on two or more nodes) a bucket's rank-major fp32 gradients go through the quantized hierarchical
// all-to-all of qgz.h instead of the ring; buckets, packing and accumulation are the same, except that a
// bucket of one unit is not packed: the unit's padded gradient is already rank-major (rank p's part is its
// shard p) and qgZ quantizes it whole when the bucket is posted, so it is reduced in place. A bucket's slow
// cross-node hop is posted when the next bucket closes, so that it runs during that bucket's backward rather
// than while the compute thread waits for it. With LoCo's error feedback each bucket keeps its two hops'
// errors (device memory, category kFeedbackCategory) from one reduction to the next. The two are one
// interface, BucketReduction (RingReduction, QgzReduction in reduce.cc), chosen when the reducer is built;
// LoCo's kept errors (LocoFeedback, qgz.h) belong to the qgZ reduction alone.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/arena.h"
#include "zero/config.h"
#include "zero/context.h"
#include "zero/events.h"
#include "zero/partition.h"
#include "zero/qgz.h"

namespace gpt {

// Splits units (in backward order) into buckets by the rule above.
std::vector<std::vector<int>> plan_buckets(const Partition& partition, const std::vector<int>& backward_order,
                                           int64_t bucket_size);
// The same for an order in segments (an interleaved pipeline stage's chunks, see GradientReducer): each
// segment's buckets by the rule, so that no bucket spans two segments.
std::vector<std::vector<int>> plan_buckets(const Partition& partition,
                                           const std::vector<std::vector<int>>& backward_segments,
                                           int64_t bucket_size);

// How one bucket's rank-major gradients become this rank's mean shard: the ring reduce-scatter, or qgZ's
// quantized hierarchical all-to-all (with LoCo's kept errors, which live here). Chosen once, when the reducer
// is built.
class BucketReduction {
 public:
  // One bucket's reduction in flight.
  struct InFlight {
    virtual ~InFlight() = default;
  };
  virtual ~BucketReduction() = default;
  // The dtype of the send buffer's elements.
  virtual DType send_dtype() const = 0;
  // Packs a unit's gradient values (part, in the accumulation dtype) into dst, as many elements of the send
  // buffer (in send_dtype()).
  virtual void pack(const Tensor& dst, const Tensor& part) = 0;
  // Posts the reduction of the send buffer (chunk elements per rank); its result will land in recv.
  virtual std::unique_ptr<InFlight> post(int bucket, const void* send, void* recv, int64_t chunk) = 0;
  // Whether post() is done with the send buffer when it returns (qgZ quantizes it there; the ring sends from
  // it until the reduction completes). Then a bucket of one unit is reduced from the unit's gradient itself.
  virtual bool done_with_send_at_post() const { return false; }
  // A later bucket was posted: starts what may run while backward computes on (qgZ's cross-node hop).
  virtual void advance(int bucket, InFlight& flight) = 0;
  // Waits until recv holds the bucket's result (chunk values in the accumulation dtype).
  virtual void wait(int bucket, InFlight& flight, void* recv) = 0;
  // Waits for a reduction whose result is not wanted and gives its buffers back (teardown mid-step).
  virtual void abandon(InFlight& flight) = 0;
  // Whether every local gradient it quantized since the last call was finite (then resets).
  virtual bool take_local_finite() { return true; }
  // LoCo's kept errors, or null when this reduction keeps none.
  virtual LocoFeedback* error_feedback() { return nullptr; }
};

// qgZ's groups and settings, for a reducer that uses it (on two or more nodes).
struct QgzGroups {
  comm::Communicator* node;   // this rank's node group
  comm::Communicator* cross;  // the group of ranks with its local index
  QgzSettings settings;
};

class GradientReducer {
 public:
  // precision is the wire dtype; the gradients and grad_shard are in its accumulation dtype (fp32, or fp64
  // for an fp64 wire). qgz: reduce by qgZ (fp32 gradients only) instead of the ring. backward_segments: the
  // order in which the units' gradients become final, in segments, each of which one micro-step hands over
  // whole: one segment (the layer loop's backward order), or an interleaved pipeline stage's chunks, whose
  // backwards run in separate micro-steps (for different micro-batches) in the schedule's order.
  GradientReducer(const Partition& partition, const std::vector<std::string>& unit_names,
                  const std::vector<std::vector<int>>& backward_segments, comm::Communicator& dp,
                  DType precision, int64_t bucket_size, bool overlap, void* grad_shard,
                  const EngineContext& context, const QgzGroups* qgz = nullptr);
  static constexpr const char* kFeedbackCategory = LocoFeedback::kCategory;
  ~GradientReducer();

  const std::vector<std::vector<int>>& buckets() const { return buckets_; }

  // Hands over unit's gradient (on the device, model layout: numel values, then zeros up to the unit's padded
  // size); units must come in backward order, one segment in a micro-step. The gradient buffer may be reused
  // as soon as this returns.
  void add(int unit, const void* grad);
  // Waits for every reduction of this micro-step, which handed over one whole segment. Each finished
  // reduction is added into grad_shard (on the device, the rank's flat shard layout, given at construction).
  void finish();
  // Whether every local gradient quantized by qgZ since the last call was finite (then resets).
  bool take_local_finite() { return reduction_->take_local_finite(); }
  // LoCo's kept errors (qgZ with zeropp_loco_param), or null.
  LocoFeedback* error_feedback() { return reduction_->error_feedback(); }

 private:
  struct Pending {
    int bucket;
    void* send;  // the packed bucket, or null when the reduction read the unit's gradient itself
    void* recv;  // in the accumulation dtype
    std::unique_ptr<BucketReduction::InFlight> flight;
  };
  // Whether bucket's send buffer is its one unit's padded gradient as handed over: already rank-major (rank
  // p's part is shard p), in the send dtype, and read by the reduction before add() returns.
  bool reduces_in_place(int bucket) const;
  // Posts bucket's reduction from send: current_send_ (packed; released when the reduction completes) or the
  // unit's gradient (reduces_in_place).
  void post(int bucket, const void* send);
  void complete_oldest();

  const Partition& partition_;
  const std::vector<std::string>& names_;
  DType accumulation_;  // of the gradients, the reduction's result and grad_shard
  bool overlap_;
  void* grad_shard_;
  const EngineContext& context_;
  Ops& ops_;
  EventLog& events_;
  std::vector<std::vector<int>> buckets_;
  std::vector<int> bucket_of_unit_;
  std::vector<int64_t> bucket_shard_elements_;  // sum of the shards of its units
  std::vector<std::vector<int>> segments_;
  std::vector<int> segment_of_unit_;
  int segment_ = -1;             // the segment this micro-step hands over (-1 before its first unit)
  size_t next_ = 0;              // index into segments_[segment_] of the next unit expected
  size_t units_in_current_ = 0;  // units already packed into the open bucket
  void* current_send_ = nullptr;
  std::deque<Pending> pending_;
  std::unique_ptr<BucketReduction> reduction_;
};

}  // namespace gpt
