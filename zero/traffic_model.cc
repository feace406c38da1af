// Closed forms of a step's traffic; see traffic_model.h.
#include "zero/traffic_model.h"

#include <vector>

#include "kernels/quant/quantize.h"
#include "model/loop.h"
#include "model/params.h"
#include "zero/reduce.h"

namespace gpt {
namespace {

using comm::Link;
using comm::Phase;

struct Shape {
  uint64_t W, L, N;
};

// A ring over `ranks` consecutive ranks spread over `nodes` nodes, each contributing c bytes.
void add_ring(comm::TrafficCounts& t, Phase phase, uint64_t ranks, uint64_t nodes, uint64_t c,
              uint64_t rings) {
  const uint64_t total = rings * ranks * (ranks - 1) * c;
  const uint64_t inter = nodes >= 2 ? rings * nodes * (ranks - 1) * c : 0;
  t.bytes[int(phase)][int(Link::kInterNode)] += inter;
  t.bytes[int(phase)][int(Link::kIntraNode)] += total - inter;
}

}  // namespace

comm::TrafficCounts expected_step_traffic(const TrafficModelInput& in) {
  const Partition& p = *in.partition;
  const ZeroConfig& z = in.zero;
  const Shape s{uint64_t(p.world_size()), uint64_t(in.ranks_per_node),
                uint64_t(p.world_size() / in.ranks_per_node)};
  const uint64_t k = in.accumulation_steps, b = dtype_size(z.precision);
  const int U = int(p.units().size());
  comm::TrafficCounts t;
  if (s.W == 1) return t;

  uint64_t P = 0;
  for (const UnitPartition& u : p.units()) P += u.padded;
  if (z.stage == 0) {  // one all-reduce at the boundary: a reduce-scatter ring and an all-gather ring
    add_ring(t, Phase::kGradReduce, s.W, s.N, P / s.W * b, 2);
    return t;
  }
  if (z.stage <= 2) {
    // Gradients: once at the boundary (stage 1) or every micro-step (stage 2); then the updated compute
    // shards are all-gathered for the next forward.
    add_ring(t, Phase::kGradReduce, s.W, s.N, P / s.W * b, z.stage == 1 ? 1 : k);
    add_ring(t, Phase::kParamGatherFwd, s.W, s.N, P / s.W * b, 1);
    return t;
  }

  // Stage 3. A unit's shard on the wire: raw, or int8 blocks plus scales with qwZ.
  auto shard_bytes = [&](int u) -> uint64_t {
    const int64_t shard = p.unit(u).shard;
    return z.quantized_weights ? quant::quantized_bytes(shard, 8, z.weight_block) : uint64_t(shard) * b;
  };
  const uint64_t h = z.hpz_partition_size;
  const bool hierarchical = z.hierarchical_allgather && s.N >= 2 && s.L >= 2;
  auto gather = [&](Phase phase, int u, bool first_after_step) {
    if (h > 1 && !first_after_step) {
      // hpZ: W/h rings of h ranks inside nodes, each member holding W/h shards.
      const uint64_t member = s.W / h * shard_bytes(u);
      for (uint64_t group = 0; group < s.W / h; ++group) add_ring(t, phase, h, 1, member, 1);
    } else if (hierarchical) {
      // L rings of N ranks, one per node (every hop crosses nodes), each member its shard; then N rings of
      // the L ranks of a node, each member the N shards it gathered.
      add_ring(t, phase, s.N, s.N, shard_bytes(u), s.L);
      add_ring(t, phase, s.L, 1, s.N * shard_bytes(u), s.N);
    } else {
      add_ring(t, phase, s.W, s.N, shard_bytes(u), 1);
    }
  };
  // The units each pass of the model's layer loop gathers, and the order its gradients become final.
  // With stage3_gather_once_per_step the first forward's gathers are the step's only ones.
  const LoopSchedule schedule = loop_schedule(U, z.tile_factor, z.recompute);
  for (uint64_t m = 0; m < (z.gather_once_per_step ? 1 : k); ++m) {
    for (int u : schedule.forward) gather(Phase::kParamGatherFwd, u, m == 0);
    if (z.gather_once_per_step) break;
    for (int u : schedule.backward) gather(Phase::kParamGatherBwd, u, false);
  }

  // Gradients, bucket by bucket, every micro-step.
  for (const std::vector<int>& bucket : plan_buckets(p, schedule.gradients, z.reduce_bucket_size)) {
    uint64_t chunk = 0;  // elements per destination rank
    for (int u : bucket) chunk += p.unit(u).shard;
    if (z.quantized_gradients && s.N >= 2) {
      // Hop 1 at the intra-node bits, hop 2 in int4.
      const uint64_t q1 =
          quant::quantized_bytes(int64_t(chunk), z.intra_node_gradient_bits, z.gradient_block);
      const uint64_t q2 = quant::quantized_bytes(int64_t(chunk), kQuantizedGradientBits, z.gradient_block);
      t.bytes[int(Phase::kGradReduce)][int(Link::kIntraNode)] += k * s.W * (s.L - 1) * s.N * q1;
      t.bytes[int(Phase::kGradReduce)][int(Link::kInterNode)] += k * s.W * (s.N - 1) * q2;
    } else {
      add_ring(t, Phase::kGradReduce, s.W, s.N, chunk * b, k);
    }
  }
  return t;
}

}  // namespace gpt
