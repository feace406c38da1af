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
// all-to-all of qgz.h instead of the ring; buckets, packing and accumulation are the same. A bucket's slow
// cross-node hop is posted when the next bucket closes, so that it runs during that bucket's backward rather
// than while the compute thread waits for it. With LoCo's error feedback each bucket keeps its two hops'
// errors (device memory, category kFeedbackCategory) from one reduction to the next.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
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

class GradientReducer {
 public:
  // precision is the wire dtype; the gradients and grad_shard are in its accumulation dtype (fp32, or fp64
  // for an fp64 wire).
  GradientReducer(const Partition& partition, const std::vector<std::string>& unit_names,
                  const std::vector<int>& backward_order, comm::Communicator& dp, DType precision,
                  int64_t bucket_size, bool overlap, void* grad_shard, const EngineContext& context);
  // Turns on qgZ (fp32 gradients only): node is this rank's node group, cross the group of ranks with its
  // local index.
  void use_quantized_gradients(comm::Communicator* node, comm::Communicator* cross,
                               const QgzSettings& settings);
  static constexpr const char* kFeedbackCategory = "qgZ error feedback";
  ~GradientReducer();

  const std::vector<std::vector<int>>& buckets() const { return buckets_; }

  // Hands over unit's gradient (numel values on the device, model layout); units must come in backward
  // order. The gradient buffer may be reused as soon as this returns.
  void add(int unit, const void* grad);
  // Waits for every reduction of this micro-step. Each finished reduction is added into grad_shard (on the
  // device, the rank's flat shard layout, given at construction).
  void finish();
  // Whether every local gradient quantized by qgZ since the last call was finite (then resets).
  bool take_local_finite();

  // LoCo's kept errors of every bucket, back to back (hop 1 then hop 2 of bucket 0, then bucket 1, ...):
  // their size (0 without feedback), a copy in host memory, and a copy back (the same size).
  size_t feedback_bytes() const;
  // What the kept errors' bytes mean: the block, the nodes and every bucket's chunk ("block 128, 2 nodes,
  // chunks 5376 2304"); two runs can exchange them when these are equal.
  std::string feedback_layout() const;
  std::vector<uint8_t> download_feedback() const;
  void upload_feedback(const std::vector<uint8_t>& bytes);
  void reset_feedback();  // every kept error to zero

 private:
  struct Pending {
    int bucket;
    comm::Request request;
    void* send;
    void* recv;  // in the accumulation dtype
    size_t send_bytes, recv_bytes;
    QgzExchange qgz;  // qgZ: its stages
  };
  void post(int bucket);
  void cross_nodes(Pending& p);  // qgZ: posts p's cross-node hop if it is not in flight yet
  std::pair<size_t, size_t> feedback_sizes(int bucket) const;  // hop 1's and hop 2's bytes
  void for_each_feedback(const std::function<void(const Tensor&, size_t)>& visit) const;  // with its offset
  QgzFeedback feedback_of(int bucket) const { return feedback_.empty() ? QgzFeedback{} : feedback_[bucket]; }
  void complete_oldest();

  const Partition& partition_;
  const std::vector<std::string>& names_;
  comm::Communicator& dp_;
  DType precision_;
  DType accumulation_;  // of the gradients, the reduction's result and grad_shard
  bool overlap_;
  void* grad_shard_;
  const EngineContext& context_;
  Ops& ops_;
  EventLog& events_;
  std::vector<std::vector<int>> buckets_;
  std::vector<int> bucket_of_unit_;
  std::vector<int64_t> bucket_shard_elements_;  // sum of the shards of its units
  std::vector<int> backward_order_;
  size_t next_ = 0;              // index into backward_order_ of the next unit expected
  size_t units_in_current_ = 0;  // units already packed into the open bucket
  void* current_send_ = nullptr;
  size_t current_send_bytes_ = 0;
  std::deque<Pending> pending_;
  comm::Communicator* qgz_node_ = nullptr;
  comm::Communicator* qgz_cross_ = nullptr;
  QgzSettings qgz_;
  std::vector<QgzFeedback> feedback_;  // per bucket, with LoCo
  bool local_finite_ = true;
};

}  // namespace gpt
