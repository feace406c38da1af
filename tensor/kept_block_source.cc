// KeptBlockSource: see kept_block_source.h.
#include "tensor/kept_block_source.h"

#include <algorithm>
#include <new>

namespace gpt {

void* KeptBlockSource::take_locked(size_t bytes) {
  if (bytes >= min_bytes_) {
    // Exactly `bytes`, else the smallest block up to kLargestFit times it.
    if (auto it = blocks_.lower_bound(bytes);
        it != blocks_.end() && double(it->first) <= kLargestFit * double(bytes)) {
      const auto [size, block] = *it;
      blocks_.erase(it);
      kept_bytes_ -= size;
      used_bytes_ += size;
      peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
      if (size != bytes) larger_.emplace(block, size);
      return block;
    }
  }
  used_bytes_ += bytes;
  peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
  const double bound = (1 + kSlack) * double(peak_used_bytes_);
  for (auto it = blocks_.begin(); it != blocks_.end() && double(used_bytes_ + kept_bytes_) > bound;) {
    inner_.release(it->second, it->first);
    kept_bytes_ -= it->first;
    it = blocks_.erase(it);
  }
  return nullptr;
}

void* KeptBlockSource::acquire(size_t bytes) {
  void* kept = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kept = take_locked(bytes);
  }
  if (kept) {
    inner_.reuse(kept, bytes);  // only the bytes the caller sees need to be made ready
    return kept;
  }
  try {
    return inner_.acquire(bytes);
  } catch (const std::bad_alloc&) {
  }
  free_all();
  try {
    return inner_.acquire(bytes);
  } catch (const std::bad_alloc&) {
    std::lock_guard<std::mutex> lock(mutex_);
    used_bytes_ -= bytes;
    throw;
  }
}

void KeptBlockSource::release(void* block, size_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (auto it = larger_.find(block); it != larger_.end()) {
    bytes = it->second;
    larger_.erase(it);
  }
  used_bytes_ -= bytes;
  if (bytes < min_bytes_) {
    lock.unlock();
    return inner_.release(block, bytes);
  }
  lock.unlock();
  inner_.retire(block, bytes);
  lock.lock();
  blocks_.emplace(bytes, block);
  kept_bytes_ += bytes;
}

size_t KeptBlockSource::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_bytes_;
}

void KeptBlockSource::free_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [size, block] : blocks_) inner_.release(block, size);
  blocks_.clear();
  kept_bytes_ = 0;
}

}  // namespace gpt
