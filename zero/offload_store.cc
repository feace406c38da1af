// One rank's swap folders, files, swapper and buffers; see offload_store.h.
#include "zero/offload_store.h"

#include <algorithm>
#include <stdexcept>

#include "zero/memory_model.h"

namespace gpt {

OffloadStore::OffloadStore(const ZeroConfig& config, const Partition& partition, int rank,
                           const EngineContext& context)
    : layout_(make_offload_layout(partition, config)), partition_(partition), context_(context) {
  const OffloadConfig& f = config.offload;
  // Both tiers in one folder share it (and its check counts both files).
  const bool shared =
      f.optimizer_on_nvme() && f.param_on_nvme() && f.optimizer_nvme_path == f.param_nvme_path;
  if (f.optimizer_on_nvme()) {
    const uint64_t bytes = layout_.optimizer_file_bytes + (shared ? layout_.param_file_bytes : 0);
    optimizer_folder_ = std::make_unique<offload::SwapFolder>(
        f.optimizer_nvme_path, f.run_id, rank, bytes, "zero_optimization.offload_optimizer.nvme_path");
    optimizer_file_ = optimizer_folder_->create_file("optimizer.swp", layout_.optimizer_file_bytes);
  }
  if (f.param_on_nvme()) {
    if (!shared) {
      param_folder_ =
          std::make_unique<offload::SwapFolder>(f.param_nvme_path, f.run_id, rank, layout_.param_file_bytes,
                                                "zero_optimization.offload_param.nvme_path");
    }
    offload::SwapFolder& folder = shared ? *optimizer_folder_ : *param_folder_;
    param_file_ = folder.create_file("param.swp", layout_.param_file_bytes);
  }
  for (const auto* folder : {optimizer_folder_.get(), param_folder_.get()}) {
    if (folder) notes_.insert(notes_.end(), folder->notes().begin(), folder->notes().end());
  }
  swapper_ = std::make_unique<offload::Swapper>(f.aio);
}

OffloadStore::~OffloadStore() {
  swapper_.reset();  // waits for everything in flight before the buffers go
  for (const auto& [aligned, allocated] : buffers_) context_.wire.release(allocated);
}

void* OffloadStore::allocate_buffer(size_t bytes, const std::string& name) {
  // Wire memory is 64-byte aligned; O_DIRECT needs kDirectAlignment.
  const size_t align = offload::kDirectAlignment;
  void* allocated = context_.wire.allocate(name, kSwapBuffersState, bytes + align);
  auto address = reinterpret_cast<uintptr_t>(allocated);
  void* aligned = reinterpret_cast<void*>((address + align - 1) / align * align);
  buffers_.push_back({aligned, allocated});
  return aligned;
}

void OffloadStore::release_buffer(void* buffer) {
  auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.first == buffer; });
  if (it == buffers_.end()) throw std::logic_error("OffloadStore: released a buffer it did not allocate");
  context_.wire.release(it->second);
  buffers_.erase(it);
}

}  // namespace gpt
