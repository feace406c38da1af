// The arena: where long-lived buffers come from (compute weights, fp32 master shards, Adam moments, gradient
// and communication buffers, saved activations), and the ledger of how much memory each kind of buffer holds.
//
// Design: every allocation is its own 64-byte aligned block, tracked by address with a name and a category,
// and can be released individually in any order. A bump arena with reset would be faster to allocate from,
// but the ZeRO engine frees out of order (a gathered layer is released while the next one's prefetch is
// alive; hpZ secondaries are dropped at the step's end), and a bump arena can only free what was allocated
// last. Allocations here are few and large, so a map lookup per call costs nothing that matters, and in
// exchange every byte is accounted to a named buffer: current and peak bytes overall and per category, which
// is what the memory table printed by the engine and the planner needs.
//
// An optional capacity turns the arena into a budget: an allocation that would exceed it throws ArenaFull
// naming the buffer and the totals, so a configuration that does not fit a device fails before work is lost.
// Where the blocks come from is a BlockSource (host memory by default; a CUDA device allocator can implement
// the same interface). The arena is thread-safe so a prefetch thread may allocate while compute runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensor/tensor.h"

namespace gpt {

// Supplies and takes back zero-filled blocks of at least `bytes` (a multiple of 64), 64-byte aligned.
class BlockSource {
 public:
  virtual ~BlockSource() = default;
  virtual void* acquire(size_t bytes) = 0;  // throws std::bad_alloc when it cannot
  virtual void release(void* block, size_t bytes) = 0;
  virtual Device device() const = 0;
  // For a KeptBlockSource above this one (tensor/kept_block_source.h): a block given back is kept instead of
  // released (retire: note the work that may still use it), then handed out again (reuse: wait for that work
  // and zero-fill the block). The defaults suit memory the host addresses and nothing else touches.
  virtual void retire(void* /*block*/, size_t /*bytes*/) {}
  virtual void reuse(void* block, size_t bytes) { std::memset(block, 0, bytes); }
  // For a caller that writes every byte before anything reads one (Arena::allocate_for_overwrite): a block
  // whose contents do not matter. A fresh block is zero-filled anyway; a kept one need not be filled again
  // (reuse_for_overwrite: the same wait as reuse, no fill). Both default to the zero-filled ones.
  virtual void* acquire_for_overwrite(size_t bytes) { return acquire(bytes); }
  virtual void reuse_for_overwrite(void* block, size_t bytes) { reuse(block, bytes); }
};

// Host memory from aligned_alloc, zero-filled. Large blocks given back are kept (KeptBlockSource, one list
// for every host arena of the process) for the next request of the same size, within the memory the process's
// blocks have held at their peak, so that buffers freed and allocated again every step do not fault their
// pages in again.
class HostBlockSource final : public BlockSource {
 public:
  void* acquire(size_t bytes) override;
  void* acquire_for_overwrite(size_t bytes) override;
  void release(void* block, size_t bytes) override;
  Device device() const override { return Device::kCPU; }
};

// Thrown when an allocation would exceed the arena's capacity; what() says which buffer and by how much.
class ArenaFull : public std::bad_alloc {
 public:
  explicit ArenaFull(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

class Arena {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kUnlimited = 0;

  struct CategoryUsage {
    std::string category;
    size_t current_bytes = 0;
    size_t peak_bytes = 0;  // this category's own high-water mark (they need not coincide in time)
    size_t blocks = 0;      // live blocks
  };

  struct Block {
    std::string name;
    std::string category;
    size_t bytes = 0;  // as reserved: the request rounded up to kAlignment
    void* data = nullptr;
  };

  // `label` names the arena in messages and reports ("host", "cuda:0"). `source` must outlive the arena;
  // null means host memory.
  explicit Arena(std::string label = "host", size_t capacity_bytes = kUnlimited,
                 BlockSource* source = nullptr);
  ~Arena();  // returns every block still live to the source
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A zero-filled block of `bytes` (rounded up to 64). Zero bytes still yields a distinct valid pointer.
  // A category may name a part of a larger one, "buffers: gradient buckets": the block counts in both, so
  // the part has its own peak and the whole ("buffers") the peak of all its parts together.
  void* allocate(std::string_view name, std::string_view category, size_t bytes);
  // The same, for a buffer the caller fills completely before reading any of it (a receive buffer, a
  // quantizer's output): its bytes are unspecified, which spares a kept block its zero-fill.
  void* allocate_for_overwrite(std::string_view name, std::string_view category, size_t bytes);
  // The same, described as a tensor on the arena's device.
  Tensor allocate_tensor(std::string_view name, std::string_view category, std::vector<int64_t> shape,
                         DType dtype);
  // Gives a block back. Throws std::invalid_argument for a pointer this arena did not hand out (or already
  // took back); null is ignored.
  void release(void* data);

  const std::string& label() const { return label_; }
  Device device() const { return source_->device(); }
  size_t capacity_bytes() const { return capacity_; }
  size_t current_bytes() const;
  size_t peak_bytes() const;
  size_t live_blocks() const;
  // Categories in the order they were first used, including ones with nothing live now.
  std::vector<CategoryUsage> usage_by_category() const;
  // Live blocks in allocation order.
  std::vector<Block> live() const;
  // A small table: one line per category with current and peak bytes, then the totals.
  std::string report() const;

 private:
  size_t index_of_locked(std::string_view category);  // in categories_, added when new
  void* allocate_from(std::string_view name, std::string_view category, size_t bytes, bool overwrite);

  std::string label_;
  size_t capacity_;
  HostBlockSource host_source_;
  BlockSource* source_;

  mutable std::mutex mutex_;
  size_t current_ = 0;
  size_t peak_ = 0;
  uint64_t next_serial_ = 0;
  struct Entry {
    Block block;
    uint64_t serial;
    size_t category_index;
    size_t whole_index;  // the category it is a part of, or kNoWhole
  };
  static constexpr size_t kNoWhole = size_t(-1);
  void account_locked(size_t category_index, size_t bytes, bool allocated);
  std::unordered_map<void*, Entry> blocks_;
  std::vector<CategoryUsage> categories_;
};

// "1.50 GiB", "12.0 MiB", "512 B": how reports print sizes.
std::string format_bytes(size_t bytes);

}  // namespace gpt
