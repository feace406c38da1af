// How the model's parameters are split over ranks. Every gather unit (wte, wpe, each block, ln_f) is padded
// to P_u = ceil(n_u / 8W) * 8W elements and cut into equal shards, 8-element aligned, one per rank; rank r
// owns shard r of every unit, and its flat shard is those pieces concatenated in unit order. Padding is zero
// and stays zero. With one shard (ZeRO stage 0) every rank owns the whole padded vector.
//
// Two layouts appear everywhere:
//   model layout  - the flat vector of model/params.h (units back to back, no padding);
//   padded layout - units back to back, each padded to P_u. A gathered unit is exactly its padded range, so
//                   the shards of W ranks laid side by side (rank-major) rebuild it.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"

namespace gpt {

struct UnitPartition {
  int64_t model_offset = 0;   // start in the model layout
  int64_t numel = 0;          // n_u
  int64_t padded = 0;         // P_u
  int64_t padded_offset = 0;  // start in the padded layout
  int64_t shard = 0;          // P_u / num_shards
  int64_t shard_offset = 0;   // start of this unit's piece in a rank's flat shard
};

class Partition {
 public:
  // world_size sets the padding (8W); num_shards is W for stages 1-3 and 1 for stage 0.
  Partition(const ParamTable& table, int world_size, int num_shards);

  int world_size() const { return world_size_; }
  int num_shards() const { return num_shards_; }
  const std::vector<UnitPartition>& units() const { return units_; }
  const UnitPartition& unit(int u) const { return units_[u]; }
  int64_t padded_total() const { return padded_total_; }  // P
  int64_t shard_total() const { return shard_total_; }    // P / num_shards

  // The model-layout range that shard `shard_index` of unit u covers, clipped to the unit's real elements
  // (the rest of the shard is padding). Empty (begin == end) when the shard is all padding.
  struct Range {
    int64_t begin = 0, end = 0;
  };
  Range owned_model_range(int u, int shard_index) const;

 private:
  int world_size_, num_shards_;
  std::vector<UnitPartition> units_;
  int64_t padded_total_ = 0, shard_total_ = 0;
};

}  // namespace gpt
