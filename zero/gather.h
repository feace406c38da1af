// Stage 3's weight gathering. Each unit's compute-weight shards are all-gathered over the data-parallel group
// right before the unit computes and released right after. The gathers of a forward or backward pass follow a
// fixed schedule; with overlap_comm the next unit's gather is posted before the current unit's compute
// starts, so communication and computation overlap.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "tensor/arena.h"
#include "zero/config.h"
#include "zero/events.h"
#include "zero/partition.h"

namespace gpt {

class WeightGatherer {
 public:
  WeightGatherer(const Partition& partition, const std::vector<std::string>& unit_names,
                 comm::Communicator& dp, Precision precision, bool overlap, Arena& arena, EventLog& events);
  ~WeightGatherer();

  // Starts a pass: the units to gather, in order, all in one phase. `shard` is this rank's compute-weight
  // shard (dtype of the precision), which the optimizer updates between passes.
  void begin_pass(std::vector<int> schedule, comm::Phase phase, const void* shard);
  // The full weights of the next scheduled unit, widened to fp32 (model layout, numel elements). Waits for
  // its gather and, with overlap, posts the following one.
  const float* acquire(int unit);
  // The unit's weights are no longer needed.
  void release(int unit);
  // Everything acquired has been released and no gather is in flight.
  bool idle() const;

 private:
  struct Slot {
    int unit = -1;
    comm::Request request;
    void* wire = nullptr;      // P_u elements in the compute dtype, as gathered
    float* weights = nullptr;  // n_u fp32 (aliases wire in fp32 mode)
    size_t wire_bytes = 0, weight_bytes = 0;
    bool posted = false, acquired = false;
  };
  void post(size_t index);
  Slot* slot_of(int unit);
  void* take_buffer(size_t bytes, const char* name);
  void give_buffer(void* buffer, size_t bytes);

  const Partition& partition_;
  const std::vector<std::string>& names_;
  comm::Communicator& dp_;
  Precision precision_;
  size_t element_bytes_;
  bool overlap_;
  Arena& arena_;
  EventLog& events_;

  std::vector<int> schedule_;
  size_t next_ = 0;  // next schedule entry to acquire
  comm::Phase phase_ = comm::Phase::kParamGatherFwd;
  const uint8_t* shard_ = nullptr;
  std::vector<Slot> slots_;  // posted or acquired, not yet released
  std::vector<std::pair<void*, size_t>> free_buffers_;
};

}  // namespace gpt
