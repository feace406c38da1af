// ParallelGroups: the tensor-parallel, data-parallel and pipeline subgroups of the world; see
// parallel_groups.h.
#include "zero/parallel_groups.h"

#include <vector>

#include "zero/engine.h"

namespace gpt {

ParallelGroups::ParallelGroups(comm::Communicator& world, int t, int p, int v)
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
  chunks_.resize(size_t(v));
  if (p > 1) create_pipeline_groups(t, d, v);
}

// In boundary order, so that each pair's two ranks create their channels in the same order.
void ParallelGroups::create_pipeline_groups(int t, int d, int v) {
  const int in_stage = world_.rank() % (t * d);  // the same tensor and data rank on every stage
  auto rank_of_stage = [&](int s) { return world_.world_rank_of(s * t * d + in_stage); };
  std::vector<int> members;
  for (int s = 0; s < p_; ++s) members.push_back(rank_of_stage(s));
  pipeline_ = world_.subgroup(members);
  for (int g = 0; g + 1 < p_ * v; ++g) {  // the boundary after model chunk g
    const int from = g % p_, to = (g + 1) % p_;
    if (stage_ != from && stage_ != to) continue;
    const std::vector<int> pair = {rank_of_stage(from), rank_of_stage(to)};
    Channels& mine = chunks_[size_t(stage_ == from ? g / p_ : (g + 1) / p_)];
    (stage_ == from ? mine.forward_out : mine.forward_in) = world_.subgroup(pair);
    (stage_ == from ? mine.backward_in : mine.backward_out) = world_.subgroup(pair);
  }
  if (stage_ == 0 || stage_ == p_ - 1)
    embedding_ = world_.subgroup({rank_of_stage(0), rank_of_stage(p_ - 1)});
}

}  // namespace gpt
