// Compute-weight shards read ahead from and written back to the param swap file; see param_swap.h.
#include "zero/param_swap.h"

#include <stdexcept>
#include <string>

namespace gpt {

ParamSwap::ParamSwap(OffloadStore& store, DType precision) : store_(store), precision_(precision) {
  const OffloadLayout& layout = store.layout();
  for (int b = 0; b < layout.param_buffers; ++b) {
    buffers_.push_back(
        {store.allocate_buffer(layout.param_buffer_bytes, "param swap buffer " + std::to_string(b))});
  }
  for (int s = 0; s < OffloadLayout::kStagingBuffers; ++s) {
    staging_.push_back(
        {store.allocate_buffer(layout.staging_buffer_bytes, "param staging buffer " + std::to_string(s))});
  }
}

ParamSwap::~ParamSwap() {
  store_.swapper().wait_all();
  for (const Buffer& b : buffers_) store_.release_buffer(b.data);
  for (const Staging& s : staging_) store_.release_buffer(s.data);
}

void ParamSwap::begin_pass(std::vector<int> units) {
  for (const Buffer& b : buffers_) {
    if (b.unit >= 0) throw std::logic_error("ParamSwap: a pass began while a shard was still held");
  }
  pass_ = std::move(units);
  next_read_ = next_acquire_ = 0;
  post_reads();
}

void ParamSwap::post_reads() {
  const OffloadLayout& layout = store_.layout();
  for (Buffer& b : buffers_) {
    if (next_read_ >= pass_.size()) return;
    if (b.unit >= 0) continue;
    b.unit = pass_[next_read_++];
    const uint64_t bytes = offload::align_up(dtype_bytes(precision_, store_.partition().unit(b.unit).shard));
    b.ticket = store_.swapper().read(store_.param_file(), layout.param_offset[b.unit], b.data, bytes);
  }
}

const void* ParamSwap::acquire(int unit) {
  if (next_acquire_ >= pass_.size() || pass_[next_acquire_] != unit) {
    throw std::logic_error("ParamSwap: unit " + std::to_string(unit) + " acquired out of order");
  }
  ++next_acquire_;
  for (Buffer& b : buffers_) {
    if (b.unit == unit) {
      store_.swapper().wait(b.ticket);
      return b.data;
    }
  }
  throw std::logic_error("ParamSwap: no buffer was free for unit " + std::to_string(unit) +
                         " (offload_param.buffer_count must be at least 2)");
}

void ParamSwap::release(int unit) {
  for (Buffer& b : buffers_) {
    if (b.unit == unit) {
      store_.context().ops.synchronize();  // no queued op may still read the buffer the next read fills
      b.unit = -1;
      post_reads();
      return;
    }
  }
  throw std::logic_error("ParamSwap: released unit " + std::to_string(unit) + " which it does not hold");
}

void ParamSwap::write_group(const float* master, const SubGroup& group) {
  const OffloadLayout& layout = store_.layout();
  const EngineContext& context = store_.context();
  Staging& staging = staging_[next_staging_++ % staging_.size()];
  for (offload::Swapper::Ticket t : staging.writes) store_.swapper().wait(t);
  staging.writes.clear();
  // Each piece is rounded into its own aligned run of the staging buffer, then written at its unit's place.
  uint64_t at = 0;
  std::vector<std::pair<uint64_t, const SubGroupPiece*>> runs;
  for (const SubGroupPiece& piece : group.pieces) {
    const int64_t n = piece.end - piece.begin;
    const int64_t from = store_.partition().unit(piece.unit).shard_offset + piece.begin - group.begin;
    context.ops.cast(context.view(static_cast<uint8_t*>(staging.data) + at, n, precision_),
                     context.view(master + from, n, DType::kF32));
    runs.push_back({at, &piece});
    at += offload::align_up(dtype_bytes(precision_, n));
  }
  context.ops.synchronize();  // the casts have finished before the disk reads the staging buffer
  for (const auto& [offset, piece] : runs) {
    const int64_t n = piece->end - piece->begin;
    const uint64_t file_at = layout.param_offset[piece->unit] + dtype_bytes(precision_, piece->begin);
    staging.writes.push_back(store_.swapper().write(store_.param_file(), file_at,
                                                    static_cast<uint8_t*>(staging.data) + offset,
                                                    offload::align_up(dtype_bytes(precision_, n))));
  }
}

void ParamSwap::finish_writes() {
  for (Staging& staging : staging_) {
    for (offload::Swapper::Ticket t : staging.writes) store_.swapper().wait(t);
    staging.writes.clear();
  }
}

}  // namespace gpt
