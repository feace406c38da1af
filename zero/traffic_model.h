// The bytes a training step moves, by phase and link class, in closed form: what the traffic meter should
// measure for a configuration, computed from the partition and the bucket plan alone. The start-up banner
// prints it and the planner (--plan) uses it for configurations it does not run.
//
// Ring over R ranks in which each rank contributes c bytes: R c bytes in all; with the ranks in N nodes
// of consecutive ranks, N c of them cross nodes (one ring link leaves each node), none when N = 1.
#pragma once

#include <array>
#include <cstdint>

#include "comm/traffic.h"
#include "zero/config.h"
#include "zero/partition.h"

namespace gpt {

struct TrafficModelInput {
  const Partition* partition = nullptr;
  ZeroConfig zero;
  int ranks_per_node = 1;  // L; the world size comes from the partition
  int accumulation_steps = 1;
};

// Expected payload bytes of one optimizer step (all ranks together): [phase][link] as in comm::TrafficCounts,
// for param_gather_fwd, param_gather_bwd and grad_reduce (eval and other are not modelled).
comm::TrafficCounts expected_step_traffic(const TrafficModelInput& input);

}  // namespace gpt
