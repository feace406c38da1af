// Partition: padding every unit to a multiple of 8W and cutting it into equal shards; see partition.h.
#include "zero/partition.h"

#include <algorithm>
#include <stdexcept>

namespace gpt {

Partition::Partition(const ParamTable& table, int world_size, int num_shards)
    : world_size_(world_size), num_shards_(num_shards) {
  if (world_size < 1 || num_shards < 1 || world_size % num_shards != 0) {
    throw std::invalid_argument("Partition: num_shards must divide the world size");
  }
  const int64_t align = 8LL * world_size;
  for (const UnitInfo& info : table.units) {
    UnitPartition u;
    u.model_offset = info.offset;
    u.numel = info.numel;
    u.padded = (info.numel + align - 1) / align * align;
    u.padded_offset = padded_total_;
    u.shard = u.padded / num_shards;
    u.shard_offset = shard_total_;
    padded_total_ += u.padded;
    shard_total_ += u.shard;
    units_.push_back(u);
  }
}

Partition::Range Partition::owned_model_range(int u, int shard_index) const {
  const UnitPartition& unit = units_[u];
  const int64_t first = std::min<int64_t>(int64_t(shard_index) * unit.shard, unit.numel);
  const int64_t last = std::min<int64_t>(first + unit.shard, unit.numel);
  return {unit.model_offset + first, unit.model_offset + last};
}

}  // namespace gpt
