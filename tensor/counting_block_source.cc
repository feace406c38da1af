// CountingBlockSource: address ranges without memory; see counting_block_source.h.
#include "tensor/counting_block_source.h"

#include <algorithm>

namespace gpt {

void* CountingBlockSource::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  void* block = reinterpret_cast<void*>(next_);
  // Ranges are never reused: every block keeps a distinct address for the arena's ledger.
  next_ += std::max<size_t>(bytes, Arena::kAlignment);
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  return block;
}

void CountingBlockSource::release(void*, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  current_ -= bytes;
}

size_t CountingBlockSource::current_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

size_t CountingBlockSource::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

}  // namespace gpt
