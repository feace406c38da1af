// The world as t x d (Megatron's layout, zero/engine.h): tensor-parallel groups of t consecutive ranks, and
// data-parallel groups of the d ranks with the same tensor-parallel rank (stride t). At t = 1 the world
// itself is the one data-parallel group.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace gpt {

class ParallelGroups {
 public:
  // Collective over world (every rank calls it with the same t). Throws comm::TopologyError (a UsageError)
  // when t does not divide the ranks per node: a tensor-parallel group stays inside one node (our rule).
  ParallelGroups(comm::Communicator& world, int t);

  comm::Communicator& world() const { return world_; }
  comm::Communicator& data() const { return data_ ? *data_ : world_; }
  comm::Communicator* tensor() const { return tensor_.get(); }  // null at t = 1
  int tensor_size() const { return tensor_ ? tensor_->size() : 1; }
  // The data-parallel group's topology: d ranks, L/t of them on each node.
  const comm::Topology& data_topology() const { return data_topology_; }

 private:
  comm::Communicator& world_;
  std::unique_ptr<comm::Communicator> tensor_, data_;
  comm::Topology data_topology_;
};

}  // namespace gpt
