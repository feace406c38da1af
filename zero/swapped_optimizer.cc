// Sub-group walks over the optimizer swap file; see swapped_optimizer.h.
#include "zero/swapped_optimizer.h"

#include <cstring>
#include <optional>

namespace gpt {

SwappedOptimizer::SwappedOptimizer(OffloadStore& store) : store_(store) {
  const OffloadLayout& layout = store.layout();
  for (int b = 0; b < layout.optimizer_buffers; ++b) {
    buffers_.push_back(static_cast<float*>(
        store.allocate_buffer(layout.optimizer_buffer_bytes, "optimizer swap buffer " + std::to_string(b))));
  }
}

SwappedOptimizer::~SwappedOptimizer() {
  store_.swapper().wait_all();
  for (float* buffer : buffers_) store_.release_buffer(buffer);
}

void SwappedOptimizer::for_each_group(Mode mode, const Visit& visit) {
  const OffloadLayout& layout = store_.layout();
  offload::Swapper& swapper = store_.swapper();
  const offload::SwapFile& file = store_.optimizer_file();
  const int groups = int(layout.sub_groups.size()), count = int(buffers_.size());
  const int lookahead = count >= 3 ? count - 2 : count - 1;
  auto record_bytes = [&](int g) { return offload::align_up(12 * uint64_t(layout.sub_groups[g].size())); };
  std::vector<std::optional<offload::Swapper::Ticket>> reads(groups), writes(count);  // writes: per buffer
  auto prepare = [&](int g) {  // the buffer of group g is free once its previous group's write completed
    const int b = g % count;
    if (writes[b]) swapper.wait(*writes[b]), writes[b].reset();
    if (mode == Mode::kOverwrite) {
      std::memset(buffers_[b], 0, record_bytes(g));
    } else {
      reads[g] = swapper.read(file, layout.record_offset[g], buffers_[b], record_bytes(g));
    }
  };
  int prepared = 0;
  for (int g = 0; g < groups; ++g) {
    while (prepared < groups && prepared <= g + lookahead) prepare(prepared++);
    if (reads[g]) swapper.wait(*reads[g]);
    float* buffer = buffers_[g % count];
    const int64_t n = layout.sub_groups[g].size();
    visit(layout.sub_groups[g], buffer, buffer + n, buffer + 2 * n);
    if (mode != Mode::kRead) {
      store_.context().ops.synchronize();  // the visit's ops have finished writing the buffer
      writes[g % count] = swapper.write(file, layout.record_offset[g], buffer, record_bytes(g));
    }
  }
  for (auto& write : writes) {
    if (write) swapper.wait(*write);
  }
}

}  // namespace gpt
