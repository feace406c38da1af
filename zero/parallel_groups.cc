// ParallelGroups: the tensor-parallel, data-parallel and pipeline subgroups of the world; see
// parallel_groups.h.
#include "zero/parallel_groups.h"

#include <vector>

#include "zero/engine.h"

namespace gpt {

ParallelGroups::ParallelGroups(comm::Communicator& world, int t, int p)
    : world_(world),
      p_(p),
      stage_(world.rank() / (world.size() / p)),
      data_topology_(
          ZeroEngine::data_parallel_topology(world.topology(), t, world.rank() % (world.size() / p) / t, p)) {
  const int d = world.size() / (t * p), stage_first = stage_ * t * d;
  if (t > 1) {
    std::vector<int> tensor_members;
    const int first = world.rank() / t * t;
    for (int i = 0; i < t; ++i) tensor_members.push_back(world.world_rank_of(first + i));
    tensor_ = world.subgroup(tensor_members);
  }
  if (t > 1 || p > 1) {
    std::vector<int> data_members;
    for (int j = 0; j < d; ++j)
      data_members.push_back(world.world_rank_of(stage_first + world.rank() % t + j * t));
    data_ = world.subgroup(data_members);
  }
  if (p > 1) create_pipeline_groups(t, d);
}

// In boundary order, so that each pair's two ranks create their channels in the same order.
void ParallelGroups::create_pipeline_groups(int t, int d) {
  const int in_stage = world_.rank() % (t * d);  // the same tensor and data rank on every stage
  auto rank_of_stage = [&](int s) { return world_.world_rank_of(s * t * d + in_stage); };
  std::vector<int> members;
  for (int s = 0; s < p_; ++s) members.push_back(rank_of_stage(s));
  pipeline_ = world_.subgroup(members);
  for (int s = 0; s + 1 < p_; ++s) {
    if (stage_ != s && stage_ != s + 1) continue;
    const std::vector<int> pair = {rank_of_stage(s), rank_of_stage(s + 1)};
    (stage_ == s ? forward_out_ : forward_in_) = world_.subgroup(pair);
    (stage_ == s ? backward_in_ : backward_out_) = world_.subgroup(pair);
  }
  if (stage_ == 0 || stage_ == p_ - 1)
    embedding_ = world_.subgroup({rank_of_stage(0), rank_of_stage(p_ - 1)});
}

}  // namespace gpt
