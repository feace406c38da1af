// Where ZeRO-Infinity's offloaded state sits in its swap files, and which buffers hold it in memory: one
// function of the partition and the config, used by the engine (to allocate and address), the memory model
// and the planner (to count), so the three never disagree.
//
// The optimizer walks this rank's flat shard in sub-groups: consecutive ranges of at most G elements, where G
// is zero_optimization.sub_group_size rounded down to a multiple of kPieceAlignment (DeepSpeed groups whole
// parameters instead, so one large embedding makes one huge sub-group; cutting units keeps every buffer at
// G). Groups are filled greedily; a unit is cut where a group is full, at a multiple of kPieceAlignment
// elements from the unit's start, so each piece (a group's intersection with a unit) starts aligned.
//
// Files (the layout of each is fixed for the run):
// - optimizer: record i is [master | m | v] of sub-group i (fp32, n_i elements each) at record_offset[i];
// - param: unit u's compute-weight shard (precision dtype) at param_offset[u].
//
// With O_DIRECT every request must start and end on 4096 bytes: each record and each unit shard starts
// aligned and its padding to the next boundary is part of the file, and a sub-group's piece of a unit
// starts at a multiple of kPieceAlignment elements into it (4096 bytes in fp16/bf16, 8192 in fp32).
#pragma once

#include <cstdint>
#include <vector>

#include "zero/config.h"
#include "zero/partition.h"

namespace gpt {

inline constexpr int64_t kPieceAlignment = 2048;  // elements

struct SubGroupPiece {
  int unit = 0;
  int64_t begin = 0, end = 0;  // within the unit's shard
};
struct SubGroup {
  int64_t begin = 0, end = 0;  // range of the flat shard
  std::vector<SubGroupPiece> pieces;
  int64_t size() const { return end - begin; }
};

struct OffloadLayout {
  int64_t group_elements = 0;  // G
  std::vector<SubGroup> sub_groups;
  // The optimizer's swap file (offload_optimizer nvme).
  std::vector<uint64_t> record_offset;  // per sub-group, each record padded to 4096 bytes
  uint64_t optimizer_file_bytes = 0;
  int optimizer_buffers = 0;  // min(buffer_count, sub-groups), at least 3 with more than 2 sub-groups
  uint64_t optimizer_buffer_bytes = 0;  // each: master, m, v of G elements, aligned
  // The compute weights' swap file (offload_param nvme).
  std::vector<uint64_t> param_offset;  // per unit
  uint64_t param_file_bytes = 0;
  int param_buffers = 0;            // offload_param.buffer_count
  uint64_t param_buffer_bytes = 0;  // each holds the largest unit shard, aligned
  // Two staging buffers (double-buffered writes), each a sub-group's compute weights for the param file.
  static constexpr int kStagingBuffers = 2;
  uint64_t staging_buffer_bytes = 0;

  uint64_t buffer_bytes() const;  // everything above that lives in memory
};

OffloadLayout make_offload_layout(const Partition& partition, const ZeroConfig& config);

}  // namespace gpt
