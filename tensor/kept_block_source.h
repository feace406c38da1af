// KeptBlockSource: a BlockSource that keeps large blocks given back and hands them out again for the next
// request they fit, instead of returning them to the source beneath it. A training step frees and allocates
// the same buffers every step (gradient buckets, qgZ's stages, wire buffers); fresh host blocks cost a page
// fault and a kernel clear per page, fresh pinned blocks a cudaHostAlloc and a cudaFreeHost with a device
// synchronization each. The host arenas (HostBlockSource) and the CUDA backend's pinned wire memory
// (kernels/cuda/cuda_ops.h) keep blocks through it.
//
// Which kept block serves a request: one of exactly its size, else the smallest up to kLargestFit times its
// size (the caller sees only the bytes it asked for; the block keeps its own size). Why not exact sizes
// alone: a step's buffers differ in size from bucket to bucket and from the tied embedding's unit to a
// layer's, so exact matches left a ZeRO++ step faulting in some 330 MB of fresh blocks per rank, every step.
//
// How much is kept: blocks in use plus kept blocks stay within kSlack above the peak of blocks in use; a
// request that no kept block serves first frees kept blocks, the smallest first (the cheapest to fault in
// again and the least likely to serve a large request), until the new block fits under that bound (or raises
// the peak, as it would without the keeping). Measured on a ZeRO++ step's trace of blocks (GPT-2 124M, 4
// ranks): fresh blocks per rank and step fell from 330 MB to under 90 MB for 5.7% more resident memory.
// An allocation the source beneath refuses is tried once more after every kept block is freed, so keeping
// can never make an allocation fail that would have succeeded without it.
#pragma once

#include <cstddef>
#include <map>
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

  // How much larger than a request a kept block that serves it may be, and how far above the peak of blocks
  // in use the kept blocks may reach (see above).
  static constexpr double kLargestFit = 1.5;
  static constexpr double kSlack = 0.05;

  // A kept block that fits `bytes` (see above), made ready by inner.reuse(), or a fresh one from inner.
  void* acquire(size_t bytes) override;
  // The same, made ready by inner.reuse_for_overwrite() (no zero-fill on the host).
  void* acquire_for_overwrite(size_t bytes) override;
  // Keeps the block (after inner.retire()) when it is large enough, else returns it to inner. `bytes` is what
  // acquire was asked for; a larger kept block that served it is kept at its own size.
  void release(void* block, size_t bytes) override;
  Device device() const override { return inner_.device(); }

  size_t kept_bytes() const;
  void free_all();  // returns every kept block to inner

 private:
  // A kept block that fits `bytes` (counted as used at its own size), or null after trimming for a fresh one.
  void* take_locked(size_t bytes);
  void* acquire_from(size_t bytes, bool overwrite);

  BlockSource& inner_;
  const size_t min_bytes_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> blocks_;       // kept, by size (smallest first)
  std::unordered_map<void*, size_t> larger_;  // handed out for a smaller request: the block's own size
  size_t kept_bytes_ = 0;
  size_t used_bytes_ = 0;       // handed out and not given back, at the blocks' own sizes
  size_t peak_used_bytes_ = 0;  // the most used_bytes_ has been
};

}  // namespace gpt
