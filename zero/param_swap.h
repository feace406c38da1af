// Stage 3's compute-weight shards on NVMe (offload_param "nvme"): each unit's shard is read from the param
// swap file into one of offload_param.buffer_count buffers ahead of its gather, in the order the pass will
// gather them (the prefetcher knows the schedule), and written back from the master after each optimizer
// step, sub-group by sub-group (offload_layout.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "zero/offload_store.h"

namespace gpt {

class ParamSwap {
 public:
  ParamSwap(OffloadStore& store, DType precision);
  ~ParamSwap();

  // The units whose shards this pass will acquire, in order; reads for the first buffers are posted now.
  void begin_pass(std::vector<int> units);
  // This rank's shard of the next unit of the pass (precision dtype, wire memory); waits for its read.
  const void* acquire(int unit);
  // The unit's shard is no longer read (its gather completed): the buffer takes the next read.
  void release(int unit);

  // Writes the compute weights of sub-group `group` (master: its fp32 values, on the ops' device) to the swap
  // file: rounded into a staging buffer by the ops, then written while the next sub-group is computed.
  void write_group(const float* master, const SubGroup& group);
  // Every write_group has reached the file (before the next pass reads it).
  void finish_writes();

 private:
  struct Buffer {
    void* data = nullptr;
    int unit = -1;  // the unit read into it, or -1 when free
    offload::Swapper::Ticket ticket = 0;
  };
  void post_reads();

  OffloadStore& store_;
  DType precision_;
  std::vector<Buffer> buffers_;
  std::vector<int> pass_;
  size_t next_read_ = 0, next_acquire_ = 0;
  struct Staging {
    void* data = nullptr;
    std::vector<offload::Swapper::Ticket> writes;
  };
  std::vector<Staging> staging_;
  size_t next_staging_ = 0;
};

}  // namespace gpt
