// The world as t x d x p (Megatron's layout, zero/engine.h): tensor-parallel groups of t consecutive ranks;
// data-parallel groups of the d ranks of one pipeline stage with the same tensor-parallel rank (stride t);
// pipeline stages of t x d consecutive ranks each, so world rank = tensor rank + t (data rank + d stage).
// At t = p = 1 the world itself is the one data-parallel group.
//
// Between the stages, point-to-point channels: for each boundary between stage s and s + 1, one two-rank
// communicator carries the activations forward (rooted at stage s) and another the gradients back (rooted at
// s + 1), between the ranks with the same tensor and data rank. One direction per channel keeps each
// channel's messages in micro-batch order on both of its ranks, as a communicator requires, whatever the
// schedule interleaves. The embedding group pairs the first and the last stage's ranks (Megatron's), which
// both hold the tied wte.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace gpt {

class ParallelGroups {
 public:
  // Collective over world (every rank calls it with the same t and p). Throws comm::TopologyError (a
  // UsageError) when t does not divide the ranks per node (a tensor-parallel group stays inside one node,
  // our rule), or when a pipeline stage's t x d ranks neither fill whole nodes nor fit inside one.
  ParallelGroups(comm::Communicator& world, int t, int p = 1);

  comm::Communicator& world() const { return world_; }
  comm::Communicator& data() const { return data_ ? *data_ : world_; }
  comm::Communicator* tensor() const { return tensor_.get(); }  // null at t = 1
  int tensor_size() const { return tensor_ ? tensor_->size() : 1; }
  // The data-parallel group's topology: d ranks, L/t of them on each node (all on one node when a node holds
  // several stages).
  const comm::Topology& data_topology() const { return data_topology_; }

  int pipeline_size() const { return p_; }
  int pipeline_stage() const { return stage_; }
  // The p ranks with this rank's tensor and data rank, one per stage in stage order (null at p = 1).
  comm::Communicator* pipeline() const { return pipeline_.get(); }
  // The channels of this rank's boundaries (null where the stage has no neighbour on that side). Each has
  // two ranks: rank 0 the earlier stage. forward_*: activations, sent by the earlier stage; backward_*:
  // gradients, sent by the later one.
  comm::Communicator* forward_in() const { return forward_in_.get(); }      // from stage - 1
  comm::Communicator* forward_out() const { return forward_out_.get(); }    // to stage + 1
  comm::Communicator* backward_in() const { return backward_in_.get(); }    // from stage + 1
  comm::Communicator* backward_out() const { return backward_out_.get(); }  // to stage - 1
  // The first and the last stage's ranks with this rank's tensor and data rank (null elsewhere, and at p =
  // 1).
  comm::Communicator* embedding() const { return embedding_.get(); }

 private:
  void create_pipeline_groups(int t, int d);

  comm::Communicator& world_;
  int p_ = 1, stage_ = 0;
  std::unique_ptr<comm::Communicator> tensor_, data_;
  comm::Topology data_topology_;
  std::unique_ptr<comm::Communicator> pipeline_, forward_in_, forward_out_, backward_in_, backward_out_,
      embedding_;
};

}  // namespace gpt
