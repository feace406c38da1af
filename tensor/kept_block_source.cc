// KeptBlockSource: see kept_block_source.h.
#include "tensor/kept_block_source.h"

#include <algorithm>
#include <new>

namespace gpt {

void* KeptBlockSource::take_locked(size_t bytes) {
  // Exactly `bytes`, else the smallest block up to kLargestFit times it.
  auto fit = bytes < min_bytes_ ? blocks_.end() : blocks_.lower_bound(bytes);
  if (fit != blocks_.end() && double(fit->first) > kLargestFit * double(bytes)) fit = blocks_.end();
  used_bytes_ += fit != blocks_.end() ? fit->first : bytes;
  peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
  if (fit != blocks_.end()) {
    const auto [size, block] = *fit;
    blocks_.erase(fit);
    kept_bytes_ -= size;
    if (size != bytes) larger_.emplace(block, size);
    return block;
  }
  const double bound = (1 + kSlack) * double(peak_used_bytes_);
  for (auto it = blocks_.begin(); it != blocks_.end() && double(used_bytes_ + kept_bytes_) > bound;) {
    inner_.release(it->second, it->first);
    kept_bytes_ -= it->first;
    it = blocks_.erase(it);
  }
  return nullptr;
}

void* KeptBlockSource::acquire(size_t bytes) {
  return acquire_from(bytes, false);
}

void* KeptBlockSource::acquire_for_overwrite(size_t bytes) {
  return acquire_from(bytes, true);
}

void* KeptBlockSource::acquire_from(size_t bytes, bool overwrite) {
  void* kept = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kept = take_locked(bytes);
  }
  if (kept) {
    // Only the bytes the caller sees need to be made ready.
    if (overwrite) {
      inner_.reuse_for_overwrite(kept, bytes);
    } else {
      inner_.reuse(kept, bytes);
    }
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = larger_.find(block); it != larger_.end()) {  // kept at its own size
      bytes = it->second;
      larger_.erase(it);
    }
    used_bytes_ -= bytes;
  }
  if (bytes < min_bytes_) return inner_.release(block, bytes);
  inner_.retire(block, bytes);
  std::lock_guard<std::mutex> lock(mutex_);
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
