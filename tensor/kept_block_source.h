// KeptBlockSource: a BlockSource that keeps large blocks given back and hands them out again for the next
// request of the same size, instead of returning them to the source beneath it. A training step frees and
// allocates the same buffers every step (gradient buckets, qgZ's stages, wire buffers); fresh host blocks
// cost a page fault and a kernel clear per 4 KiB, fresh pinned blocks a cudaHostAlloc and a cudaFreeHost with
// a device synchronization each. The host arenas (HostBlockSource) and the CUDA backend's pinned wire memory
// (kernels/cuda/cuda_ops.h) keep blocks through it.
//
// Kept blocks use only memory that was held before: blocks in use plus kept blocks never exceed the peak of
// blocks in use, so a request that no kept block fits first frees kept blocks until the new block fits under
// that peak (or raises it, as it would without the keeping). An allocation the source beneath refuses is
// tried once more after every kept block is freed, so keeping can never make an allocation fail that would
// have succeeded without it.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "tensor/arena.h"

namespace gpt {

class KeptBlockSource final : public BlockSource {
 public:
  // Blocks under min_bytes go straight back to `inner` (which must outlive this source).
  KeptBlockSource(BlockSource& inner, size_t min_bytes) : inner_(inner), min_bytes_(min_bytes) {}
  ~KeptBlockSource() override { free_all(); }
  KeptBlockSource(const KeptBlockSource&) = delete;
  KeptBlockSource& operator=(const KeptBlockSource&) = delete;

  // A kept block of exactly `bytes`, made ready by inner.reuse(), or a fresh one from inner.
  void* acquire(size_t bytes) override;
  // Keeps the block (after inner.retire()) when it is large enough, else returns it to inner.
  void release(void* block, size_t bytes) override;
  Device device() const override { return inner_.device(); }

  size_t kept_bytes() const;
  void free_all();  // returns every kept block to inner

 private:
  void* take_locked(size_t bytes);  // a kept block of `bytes`, or null after trimming to the peak

  BlockSource& inner_;
  const size_t min_bytes_;
  mutable std::mutex mutex_;
  std::unordered_multimap<size_t, void*> blocks_;  // kept, by size
  size_t kept_bytes_ = 0;
  size_t used_bytes_ = 0;       // handed out and not given back
  size_t peak_used_bytes_ = 0;  // the most used_bytes_ has been
};

}  // namespace gpt
