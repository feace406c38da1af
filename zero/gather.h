// Stage 3's weight gathering, with ZeRO++'s qwZ and hpZ. Each unit's compute-weight shards are all-gathered
// right before the unit computes and released right after; the gathers of a pass follow a fixed schedule, and
// with overlap_comm the next unit's gather is posted before the current unit's compute starts.
//
// qwZ: each rank sends its shard as int8 blocks plus fp32 scales (kernels/quant) and every rank dequantizes
// all W shards on arrival, its own included, so all ranks compute with identical weights
// dequant(quant(shard)). hpZ: when a unit gathered from the primary shards is released, this rank keeps slice
// (rank mod h) of what arrived (P_u/h elements, or with qwZ the int8 blocks and scales of W/h shards exactly
// as they arrived); every later gather of the unit before the next optimizer step is a ring over the h
// consecutive ranks of this node's hpZ group, which rebuilds the same bytes, so forward, recomputation and
// backward use bit-identical weights. Secondaries are dropped after each optimizer step and on checkpoint
// load. qwZ quantizes this rank's own shard of a unit once per weight change and sends those bytes on every
// primary gather until the next one (the same bytes a fresh quantization would give). On a CPU backend a
// gather is decoded (dequantized, or cast from fp16/bf16) one rank's block at a time as the ring delivers
// it, so the decoding of the first blocks overlaps the arrival of the last (comm::Request::wait_block).
//
// stage3_gather_once_per_step: a unit's full weights are kept from their first gather after a weight change
// until the next (weights_changed), and every later acquire of the unit hands them out without a gather: the
// step's other micro-batches, the backward and recomputation. They are the bytes a re-gather would bring
// (hpZ's secondary rebuilds exactly what arrived), so nothing else changes; no secondaries are kept then.
//
// The hierarchical gather (zero_hierarchical_allgather, on N >= 2 nodes of L >= 2 ranks): a primary gather
// first all-gathers this rank's shard among the N ranks with its local index (one per node: each shard
// crosses to every other node once), then spreads those N shards inside the node (an all-gather of L blocks,
// in place). The wire buffer then holds the shards local-index-major: position l N + n holds the shard of
// rank n L + l. Decoding and hpZ's secondary read each shard from its position, so the weights (and the
// secondaries) are bit for bit those of the flat ring, which sends the same shards around all W ranks and
// carries W-1 of them over every node boundary. The cross-node step of the next unit is posted with
// overlap_comm while this unit spreads and computes.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/layers.h"
#include "tensor/arena.h"
#include "zero/config.h"
#include "zero/context.h"
#include "zero/events.h"
#include "zero/partition.h"

namespace gpt {

class ParamSwap;
class OwnShards;  // where this rank's own shards come from (gather.cc)

class WeightGatherer {
 public:
  // hpz: the hpZ group (h consecutive ranks of one node), or null when hpZ is off. swap: where this rank's
  // shards are read from when they live on NVMe (offload_param), or null.
  // node, cross: the hierarchical gather's groups (this rank's node; the ranks with its local index on every
  // node), or null for the flat ring. half_loop: the layer loop computes in the compute weights' own fp16 or
  // bf16 (LayerLoop's compute dtype), so acquire() hands them out as they are, not widened to fp32.
  WeightGatherer(const Partition& partition, const std::vector<std::string>& unit_names,
                 comm::Communicator& dp, comm::Communicator* hpz, const ZeroConfig& config,
                 const EngineContext& context, ParamSwap* swap = nullptr, comm::Communicator* node = nullptr,
                 comm::Communicator* cross = nullptr, bool half_loop = false);
  ~WeightGatherer();

  // Starts a pass: the units to gather, in order, all in one phase. `shard` is this rank's compute-weight
  // shard (dtype of the precision, in wire memory), which the optimizer updates between steps; null when the
  // shards are read from the swap (which is then told the units whose shards this pass sends). A pass begun
  // ahead with the same schedule and phase is taken up as it is (its first gather is on the way); another
  // pass waits for that one's gather and drops it.
  void begin_pass(std::vector<int> schedule, comm::Phase phase, const void* shard);
  // Begins a pass before its compute is due, and posts its first unit's gather now: the engine calls it from
  // the optimizer, once that unit's shard holds the new weights, so the gather crosses while the rest of the
  // shard updates. The next begin_pass takes it up; a weight change before then drops it.
  void begin_pass_ahead(std::vector<int> schedule, comm::Phase phase, const void* shard);
  // Waits until the gather begun ahead has sent and received its bytes (its cross-node step, when
  // hierarchical: the spread goes out when the unit is acquired). The engine calls it as its step ends, so
  // the meter counts those bytes in that step whatever the timing; the next forward would wait for them
  // first thing anyway.
  void finish_ahead();
  // The full weights of the next scheduled unit on the device (model layout, numel elements), in the loop's
  // compute dtype: the loop dtype of context.h (fp32, or fp64 with fp64 compute weights), or the compute
  // weights' fp16/bf16 in a half loop. Waits for its gather and, with overlap, posts the following one.
  WeightView acquire(int unit) { return {acquire_weights(unit), weights_dtype_}; }
  // The unit's weights are no longer needed (hpZ keeps this rank's secondary slice of a primary gather).
  void release(int unit);
  // Everything acquired has been released and no gather is in flight.
  bool idle() const;
  // Forgets every hpZ secondary, quantized own shard and kept unit, and drops a pass begun ahead: the weights
  // are changing (optimizer step, checkpoint load).
  void weights_changed();

  // Bytes one rank sends for unit u on a primary gather (the shard, raw or quantized) and P_u/h's share that
  // a secondary holds (W/h of those).
  size_t shard_wire_bytes(int unit) const;
  size_t secondary_bytes(int unit) const;
  size_t secondary_bytes_held() const;                             // sum over the units that hold one now
  size_t secondary_bytes_peak() const { return secondary_peak_; }  // the most held at once so far

 private:
  struct Slot {
    int unit = -1;
    bool from_secondary = false;
    comm::Request request;
    void* wire = nullptr;     // what arrives: W shards, raw or quantized, rank-major (wire)
    void* weights = nullptr;  // P_u in the loop dtype (device)
    size_t wire_bytes = 0, weight_bytes = 0;
    size_t wire_capacity = 0, weight_capacity = 0;  // of the pooled buffers, which may be larger
    bool acquired = false;
    bool holds_own_shard = false;    // the send buffer is own_'s, given back once gathered
    bool local_index_major = false;  // arrived by the hierarchical gather (see above)
    bool spread_pending = false;     // its cross-node step is posted, the spread inside the node not yet
  };
  const void* acquire_weights(int unit);
  void post(size_t index);
  // Waits for every posted gather and gives its buffers back unread (a pass begun ahead, not taken up).
  void drop_posted();
  // With overlap_comm: posts the gather of schedule entry `index` unless it is kept, posted or past the end.
  void prefetch(size_t index);
  Slot* slot_of(int unit);
  // Turns `shards` shards of what arrived, from rank `first`'s on, into the loop dtype's weights; they sit
  // at wire position `at` on.
  void decode(const Slot& slot, int first, int shards, int at);
  // The wire position of rank r's shard in the slot.
  int position_of(const Slot& slot, int rank) const;
  // The hierarchical gather's second step: waits for the cross-node step, then posts the spread in the node.
  void spread(Slot& slot);
  // Copies this rank's hpZ slice of a primary gather (the shards of ranks [j W/h, (j+1) W/h), j its rank in
  // the hpZ group) into `secondary`, rank-major, whatever the slot's order.
  void keep_secondary(const Slot& slot, void* secondary);
  // Waits for the slot's gather and decodes all of it (block by block as they arrive, or at once).
  void wait_and_decode(Slot& slot);
  const void* quantized_own_shard(int unit);  // quantizes it when the weights changed since
  // This rank's shard of the unit as it would be sent raw: in the shard, or read from the swap.
  const void* own_shard(int unit);
  bool needs_own_shard(int unit) const;  // neither an hpZ secondary nor a kept quantized shard serves it
  // Pooled buffers of one arena (wire or device), reused best-fit; *capacity is the buffer's own size, which
  // is what give_buffer must be told, or the pool forgets a large buffer's size once a small unit used it.
  void* take_buffer(Arena& arena, size_t bytes, const char* name, size_t* capacity);
  void give_buffer(Arena& arena, void* buffer, size_t bytes);

  const Partition& partition_;
  const std::vector<std::string>& names_;
  comm::Communicator& dp_;
  comm::Communicator* hpz_;
  comm::Communicator* node_;  // the hierarchical gather's groups, or null
  comm::Communicator* cross_;
  ZeroConfig config_;
  size_t element_bytes_;
  DType weights_dtype_;  // of the weights acquire() hands out
  const EngineContext& context_;
  Ops& ops_;
  EventLog& events_;
  // This rank's shards: the shard begin_pass names, or ParamSwap's reads; chosen once, at construction.
  std::unique_ptr<OwnShards> own_;
  // A CPU backend decodes each block of a gather as it lands; a GPU backend decodes a unit in one kernel
  // launch once all of it is there (NCCL reports no per-block arrival).
  const bool decode_on_arrival_;

  std::vector<int> schedule_;
  size_t next_ = 0;     // next schedule entry to acquire
  bool ahead_ = false;  // the pass was begun ahead and no begin_pass has taken it up yet
  comm::Phase phase_ = comm::Phase::kParamGatherFwd;
  std::vector<Slot> slots_;  // posted or acquired, not yet released
  struct FreeBuffer {
    Arena* arena;
    void* data;
    size_t bytes;
  };
  std::vector<FreeBuffer> free_buffers_;
  std::vector<void*> secondaries_;    // per unit: this rank's hpZ slice, or null
  std::vector<void*> quantized_own_;  // per unit with qwZ: this rank's shard quantized since the last change
  // stage3_gather_once_per_step: per unit, its full weights kept since its first gather after the last
  // weight change (device, the loop's compute dtype), or null, and the pooled buffer's capacity.
  std::vector<void*> kept_;
  std::vector<size_t> kept_capacity_;
  size_t secondary_peak_ = 0;
};

}  // namespace gpt
