// The world as t x d x p (Megatron's layout, zero/engine.h): tensor-parallel groups of t consecutive ranks;
// data-parallel groups of the d ranks of one pipeline stage with the same tensor-parallel rank (stride t);
// pipeline stages of t x d consecutive ranks each, so world rank = tensor rank + t (data rank + d stage).
// At t = p = 1 the world itself is the one data-parallel group.
//
// Between the stages, point-to-point channels: for each boundary between model chunks (model/pipeline.h: one
// chunk per stage, or v with the interleaved schedule, chunk g on stage g % p), one two-rank communicator
// carries the activations forward (rooted at the earlier chunk's stage) and another the gradients back,
// between the ranks with the same tensor and data rank. One boundary and one direction per channel keeps each
// channel's messages in micro-batch order on both of its ranks, as a communicator requires, whatever the
// schedule interleaves. The embedding group pairs the first and the last stage's ranks (Megatron's), which
// both hold the tied wte.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace gpt {

class ParallelGroups {
 public:
  // Collective over world (every rank calls it with the same t and p). Throws comm::TopologyError (a
  // UsageError) when t does not divide the ranks per node (a tensor-parallel group stays inside one node,
  // our rule), or when a pipeline stage's t x d ranks neither fill whole nodes nor fit inside one.
  // v: the model chunks each stage runs (the interleaved schedule's virtual stages).
  ParallelGroups(comm::Communicator& world, int t, int p = 1, int v = 1);

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
  // The channels of this rank's chunk c (0 .. v-1; the model's chunk c p + stage), null where the chunk has
  // no neighbour on that side. Each has two ranks: rank 0 the earlier chunk's stage. forward_*: activations,
  // sent by the earlier chunk; backward_*: gradients, sent by the later one.
  comm::Communicator* forward_in(int c = 0) const { return chunks_[size_t(c)].forward_in.get(); }
  comm::Communicator* forward_out(int c = 0) const { return chunks_[size_t(c)].forward_out.get(); }
  comm::Communicator* backward_in(int c = 0) const { return chunks_[size_t(c)].backward_in.get(); }
  comm::Communicator* backward_out(int c = 0) const { return chunks_[size_t(c)].backward_out.get(); }
  int chunks() const { return int(chunks_.size()); }
  // The first and the last stage's ranks with this rank's tensor and data rank (null elsewhere, and at p =
  // 1).
  comm::Communicator* embedding() const { return embedding_.get(); }

 private:
  void create_pipeline_groups(int t, int d, int v);

  struct Channels {
    std::unique_ptr<comm::Communicator> forward_in, forward_out, backward_in, backward_out;
  };
  comm::Communicator& world_;
  int p_ = 1, stage_ = 0;
  std::unique_ptr<comm::Communicator> tensor_, data_;
  comm::Topology data_topology_;
  std::unique_ptr<comm::Communicator> pipeline_, embedding_;
  std::vector<Channels> chunks_;  // one per chunk of this stage
};

}  // namespace gpt
