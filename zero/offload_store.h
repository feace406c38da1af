// One rank's ZeRO-Infinity tier: its swap folders and files, the swapper that moves them, and the aligned
// buffers that hold swapped-in state. The engine builds it when offload_optimizer or offload_param is "nvme";
// the optimizer state (optimizer_state.h) and stage 3's weight source (gather.h) use it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "offload/swap_folder.h"
#include "offload/swapper.h"
#include "zero/config.h"
#include "zero/context.h"
#include "zero/offload_layout.h"
#include "zero/partition.h"

namespace gpt {

class OffloadStore {
 public:
  // rank: this rank's index in the world (its folders are nvme_path/<run id>/rank<rank>/).
  OffloadStore(const ZeroConfig& config, const Partition& partition, int rank, const EngineContext& context);
  ~OffloadStore();

  const OffloadLayout& layout() const { return layout_; }
  const EngineContext& context() const { return context_; }
  const Partition& partition() const { return partition_; }
  offload::Swapper& swapper() { return *swapper_; }
  const offload::Swapper& swapper() const { return *swapper_; }
  const offload::SwapFile& optimizer_file() const { return *optimizer_file_; }  // offload_optimizer nvme
  const offload::SwapFile& param_file() const { return *param_file_; }          // offload_param nvme
  // Lines for the banner: where the files are, O_DIRECT or its fallback, stale folders removed.
  const std::vector<std::string>& notes() const { return notes_; }

  // A buffer of `bytes` in wire memory (host-visible: the swapper reads and writes it, ops compute on it),
  // aligned for O_DIRECT and counted in the memory table's "swap buffers" line.
  void* allocate_buffer(size_t bytes, const std::string& name);
  void release_buffer(void* buffer);

 private:
  OffloadLayout layout_;
  const Partition& partition_;
  const EngineContext& context_;
  std::unique_ptr<offload::SwapFolder> optimizer_folder_, param_folder_;
  std::unique_ptr<offload::SwapFile> optimizer_file_, param_file_;
  std::unique_ptr<offload::Swapper> swapper_;
  std::vector<std::pair<void*, void*>> buffers_;  // (aligned, as allocated)
  std::vector<std::string> notes_;
};

}  // namespace gpt
