// ParallelGroups: the tensor- and data-parallel subgroups of the world; see parallel_groups.h.
#include "zero/parallel_groups.h"

#include <vector>

#include "zero/engine.h"

namespace gpt {

ParallelGroups::ParallelGroups(comm::Communicator& world, int t)
    : world_(world),
      data_topology_(ZeroEngine::data_parallel_topology(world.topology(), t, world.rank() / t)) {
  if (t == 1) return;
  const int first = world.rank() / t * t, d = world.size() / t;
  std::vector<int> tensor_members, data_members;
  for (int i = 0; i < t; ++i) tensor_members.push_back(world.world_rank_of(first + i));
  for (int j = 0; j < d; ++j) data_members.push_back(world.world_rank_of(world.rank() % t + j * t));
  tensor_ = world.subgroup(tensor_members);
  data_ = world.subgroup(data_members);
}

}  // namespace gpt
