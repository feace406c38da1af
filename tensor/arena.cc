// Arena: individually tracked, aligned blocks (zero-filled, or as they come for a buffer its caller
// overwrites) with per-category accounting (see arena.h).
#include "tensor/arena.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "tensor/host_pages.h"
#include "tensor/kept_block_source.h"

namespace gpt {

namespace {

// Host memory as it comes, zero-filled (large blocks on huge pages: host_pages.h).
class AlignedBlockSource final : public BlockSource {
 public:
  void* acquire(size_t bytes) override { return allocate_zeroed_host(bytes); }
  void release(void* block, size_t bytes) override { free_host(block, bytes); }
  void reuse_for_overwrite(void*, size_t) override {}  // nothing else touches host memory: no wait
  Device device() const override { return Device::kCPU; }
};

// Blocks of at least 128 KiB are kept: smaller ones come from malloc's own free lists without faults.
KeptBlockSource& kept_host_blocks() {
  static AlignedBlockSource* aligned = new AlignedBlockSource;
  // Never destroyed: arenas with static lifetime release into it.
  static KeptBlockSource* kept = new KeptBlockSource(*aligned, size_t(128) << 10);
  return *kept;
}

}  // namespace

void* HostBlockSource::acquire(size_t bytes) {
  return kept_host_blocks().acquire(bytes);
}

void* HostBlockSource::acquire_for_overwrite(size_t bytes) {
  return kept_host_blocks().acquire_for_overwrite(bytes);
}

void HostBlockSource::release(void* block, size_t bytes) {
  kept_host_blocks().release(block, bytes);
}

Arena::Arena(std::string label, size_t capacity_bytes, BlockSource* source)
    : label_(std::move(label)), capacity_(capacity_bytes), source_(source ? source : &host_source_) {}

Arena::~Arena() {
  for (auto& [data, entry] : blocks_) source_->release(data, entry.block.bytes);
}

size_t Arena::index_of_locked(std::string_view category) {
  for (size_t i = 0; i < categories_.size(); ++i) {
    if (categories_[i].category == category) return i;
  }
  categories_.push_back(CategoryUsage{std::string(category)});
  return categories_.size() - 1;
}

void* Arena::allocate(std::string_view name, std::string_view category, size_t bytes) {
  return allocate_from(name, category, bytes, false);
}

void* Arena::allocate_for_overwrite(std::string_view name, std::string_view category, size_t bytes) {
  return allocate_from(name, category, bytes, true);
}

void* Arena::allocate_from(std::string_view name, std::string_view category, size_t bytes, bool overwrite) {
  // Zero-byte requests get one aligned unit so each allocation keeps a distinct address to release by.
  const size_t reserved = std::max<size_t>((bytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ != kUnlimited && current_ + reserved > capacity_) {
    throw ArenaFull("arena '" + label_ + "': cannot allocate '" + std::string(name) + "' (" +
                    std::string(category) + ", " + format_bytes(reserved) + "): " + format_bytes(current_) +
                    " of its " + format_bytes(capacity_) +
                    " are in use; reduce the model or batch size, or " + "spread the state over more ranks");
  }
  void* data = overwrite ? source_->acquire_for_overwrite(reserved) : source_->acquire(reserved);
  const size_t category_index = index_of_locked(category);
  const size_t part_mark = category.find(": ");
  const size_t whole_index =
      part_mark == std::string_view::npos ? kNoWhole : index_of_locked(category.substr(0, part_mark));
  blocks_.emplace(data, Entry{Block{std::string(name), categories_[category_index].category, reserved, data},
                              next_serial_++, category_index, whole_index});
  current_ += reserved;
  peak_ = std::max(peak_, current_);
  account_locked(category_index, reserved, true);
  if (whole_index != kNoWhole) account_locked(whole_index, reserved, true);
  return data;
}

void Arena::account_locked(size_t category_index, size_t bytes, bool allocated) {
  CategoryUsage& usage = categories_[category_index];
  if (allocated) {
    usage.current_bytes += bytes;
    usage.peak_bytes = std::max(usage.peak_bytes, usage.current_bytes);
    usage.blocks += 1;
  } else {
    usage.current_bytes -= bytes;
    usage.blocks -= 1;
  }
}

Tensor Arena::allocate_tensor(std::string_view name, std::string_view category, std::vector<int64_t> shape,
                              DType dtype) {
  Tensor tensor{nullptr, std::move(shape), dtype, device()};
  for (int64_t extent : tensor.shape) {
    if (extent < 0) {
      throw std::invalid_argument("arena '" + label_ + "': tensor '" + std::string(name) +
                                  "' has a negative extent: " + tensor.describe());
    }
  }
  tensor.data = allocate(name, category, tensor.nbytes());
  return tensor;
}

void Arena::release(void* data) {
  if (!data) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(data);
  if (it == blocks_.end()) {
    std::ostringstream message;
    message << "arena '" << label_ << "': release of " << data
            << ", which this arena did not allocate or already took back";
    throw std::invalid_argument(message.str());
  }
  const Entry& entry = it->second;
  account_locked(entry.category_index, entry.block.bytes, false);
  if (entry.whole_index != kNoWhole) account_locked(entry.whole_index, entry.block.bytes, false);
  current_ -= entry.block.bytes;
  source_->release(data, entry.block.bytes);
  blocks_.erase(it);
}

size_t Arena::current_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

size_t Arena::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

size_t Arena::live_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.size();
}

std::vector<Arena::CategoryUsage> Arena::usage_by_category() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return categories_;
}

std::vector<Arena::Block> Arena::live() const {
  std::vector<std::pair<uint64_t, Block>> ordered;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ordered.reserve(blocks_.size());
    for (const auto& [data, entry] : blocks_) ordered.emplace_back(entry.serial, entry.block);
  }
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Block> result;
  result.reserve(ordered.size());
  for (auto& [serial, block] : ordered) result.push_back(std::move(block));
  return result;
}

std::string Arena::report() const {
  std::vector<CategoryUsage> categories;
  size_t current, peak, blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    categories = categories_;
    current = current_;
    peak = peak_;
    blocks = blocks_.size();
  }
  std::ostringstream out;
  char line[160];
  out << "memory of arena '" << label_ << "' (" << device_name(device()) << ")";
  if (capacity_ != kUnlimited) out << ", capacity " << format_bytes(capacity_);
  out << "\n";
  std::snprintf(line, sizeof line, "  %-20s %12s %12s %8s\n", "category", "current", "peak", "blocks");
  out << line;
  for (const auto& usage : categories) {
    std::snprintf(line, sizeof line, "  %-20s %12s %12s %8zu\n", usage.category.c_str(),
                  format_bytes(usage.current_bytes).c_str(), format_bytes(usage.peak_bytes).c_str(),
                  usage.blocks);
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-20s %12s %12s %8zu\n", "total", format_bytes(current).c_str(),
                format_bytes(peak).c_str(), blocks);
  out << line;
  return out.str();
}

std::string format_bytes(size_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, value < 10.0 ? "%.2f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace gpt
