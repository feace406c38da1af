// KeptBlockSource: see kept_block_source.h.
#include "tensor/kept_block_source.h"

#include <algorithm>
#include <new>

namespace gpt {

void* KeptBlockSource::take_locked(size_t bytes) {
  used_bytes_ += bytes;
  peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
  if (bytes < min_bytes_) return nullptr;
  if (auto it = blocks_.find(bytes); it != blocks_.end()) {
    void* block = it->second;
    blocks_.erase(it);
    kept_bytes_ -= bytes;
    return block;
  }
  for (auto it = blocks_.begin(); it != blocks_.end() && used_bytes_ + kept_bytes_ > peak_used_bytes_;) {
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
    inner_.reuse(kept, bytes);
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
  if (bytes >= min_bytes_) inner_.retire(block, bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  used_bytes_ -= bytes;
  if (bytes < min_bytes_) return inner_.release(block, bytes);
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
