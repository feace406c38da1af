// The swap files' layout and the offload buffers; see offload_layout.h.
#include "zero/offload_layout.h"

#include <algorithm>

namespace gpt {
namespace {

using offload::align_up;

// Sub-groups of at most G elements over the flat shard, filled greedily: a unit is cut where a group is full,
// at a multiple of kPieceAlignment elements from the unit's start (G is such a multiple).
std::vector<SubGroup> plan_sub_groups(const Partition& partition, int64_t G) {
  std::vector<SubGroup> groups;
  SubGroup current;
  for (int u = 0; u < int(partition.units().size()); ++u) {
    const UnitPartition& unit = partition.unit(u);
    for (int64_t begin = 0; begin < unit.shard;) {
      int64_t room = G - current.size();
      if (unit.shard - begin > room) room = room / kPieceAlignment * kPieceAlignment;  // cut on the grid
      if (room == 0) {
        groups.push_back(std::move(current));
        current = SubGroup{};
        continue;
      }
      const int64_t end = std::min(unit.shard, begin + room);
      if (current.pieces.empty()) current.begin = current.end = unit.shard_offset + begin;
      current.pieces.push_back({u, begin, end});
      current.end += end - begin;
      begin = end;
    }
  }
  if (!current.pieces.empty()) groups.push_back(std::move(current));
  return groups;
}

}  // namespace

uint64_t OffloadLayout::buffer_bytes() const {
  // Each buffer is allocated with kDirectAlignment spare bytes, to align it for O_DIRECT.
  auto buffers = [](int count, uint64_t bytes) {
    return bytes ? uint64_t(count) * (bytes + offload::kDirectAlignment) : 0;
  };
  return buffers(optimizer_buffers, optimizer_buffer_bytes) + buffers(param_buffers, param_buffer_bytes) +
         buffers(kStagingBuffers, staging_buffer_bytes);
}

OffloadLayout make_offload_layout(const Partition& partition, const ZeroConfig& config) {
  const OffloadConfig& f = config.offload;
  OffloadLayout layout;
  if (!f.optimizer_on_nvme() && !f.param_on_nvme()) return layout;
  layout.group_elements = std::max(kPieceAlignment, f.sub_group_size / kPieceAlignment * kPieceAlignment);
  layout.sub_groups = plan_sub_groups(partition, layout.group_elements);
  const int64_t largest_group = [&] {
    int64_t n = 0;
    for (const SubGroup& g : layout.sub_groups) n = std::max(n, g.size());
    return n;
  }();
  const int groups = int(layout.sub_groups.size());
  if (f.optimizer_on_nvme()) {
    for (const SubGroup& g : layout.sub_groups) {
      layout.record_offset.push_back(layout.optimizer_file_bytes);
      layout.optimizer_file_bytes += align_up(12 * uint64_t(g.size()));
    }
    layout.optimizer_buffers = std::min(f.optimizer_buffer_count, groups);
    layout.optimizer_buffer_bytes = align_up(12 * uint64_t(largest_group));
  }
  if (f.param_on_nvme()) {
    const uint64_t cb = dtype_size(config.precision);
    uint64_t offset = 0, largest_unit = 0;
    for (const UnitPartition& u : partition.units()) {
      layout.param_offset.push_back(offset);
      offset += align_up(cb * uint64_t(u.shard));
      largest_unit = std::max(largest_unit, align_up(cb * uint64_t(u.shard)));
    }
    layout.param_file_bytes = offset;
    layout.param_buffers = f.param_buffer_count;
    layout.param_buffer_bytes = largest_unit;
    // Each piece of a sub-group starts on its own 4096-byte boundary in the staging buffer.
    size_t most_pieces = 0;
    for (const SubGroup& g : layout.sub_groups) most_pieces = std::max(most_pieces, g.pieces.size());
    layout.staging_buffer_bytes =
        align_up(cb * uint64_t(largest_group)) + offload::kDirectAlignment * most_pieces;
  }
  return layout;
}

}  // namespace gpt
