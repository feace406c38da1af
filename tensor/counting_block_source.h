// CountingBlockSource: a BlockSource that hands out address ranges and allocates nothing. The planner and the
// memory guard build the real engine over it (with the backend that computes nothing, kernels/dry) to learn
// what the engine's arenas would hold, by running one step's schedule without arithmetic: the arenas keep
// their ledgers as always, and their peak_bytes() are the answer. The addresses are never dereferenced, so a
// model of any size can be "allocated" in no memory and no time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "tensor/arena.h"

namespace gpt {

class CountingBlockSource final : public BlockSource {
 public:
  explicit CountingBlockSource(Device device = Device::kCPU) : device_(device) {}

  // A fresh, never reused range of `bytes` in an address space no memory backs (never null).
  void* acquire(size_t bytes) override;
  void release(void* block, size_t bytes) override;
  Device device() const override { return device_; }
  // Blocks given back are never touched, so they need no zero fill before reuse.
  void reuse(void*, size_t) override {}

  size_t current_bytes() const;
  size_t peak_bytes() const;

 private:
  Device device_;
  mutable std::mutex mutex_;
  uintptr_t next_ = kBase;  // the next range's start
  size_t current_ = 0, peak_ = 0;

 public:
  // Where the ranges start: high in the address space, far from anything the process maps, and aligned
  // for any request (a stray dereference faults instead of reading real memory).
  static constexpr uintptr_t kBase = uintptr_t(1) << 46;
};

}  // namespace gpt
