// The engine's dry run; see dry_run.h.
#include "zero/dry_run.h"

#include <optional>
#include <vector>

#include "comm/dry_communicator.h"
#include "kernels/dry/dry_ops.h"
#include "zero/engine.h"
#include "zero/parallel_groups.h"

namespace gpt {
namespace {

// Enough steps for the engine's buffer pools to settle: the first step allocates, the second may still grow
// a pool whose best fit was left short; from then on each step repeats the one before. A step that grew no
// peak means the pools have settled already.
constexpr int kMaxSteps = 3;

// Every category's peak in both arenas, to see whether a step grew any.
std::vector<size_t> peaks_of(const ZeroEngine& engine) {
  std::vector<size_t> peaks;
  for (const Arena* arena : {&engine.device_arena(), &engine.wire_arena()}) {
    for (const Arena::CategoryUsage& c : arena->usage_by_category()) peaks.push_back(c.peak_bytes);
  }
  return peaks;
}

void add_peaks(const std::vector<Arena::CategoryUsage>& usage, const std::string& category, size_t& bytes) {
  for (const Arena::CategoryUsage& c : usage) {
    if (c.category == category) bytes += c.peak_bytes;
  }
}

}  // namespace

size_t DryRunMemory::peak(const std::string& category) const {
  size_t bytes = 0;
  add_peaks(device, category, bytes);
  add_peaks(wire, category, bytes);
  return bytes;
}

std::vector<std::pair<std::string, size_t>> DryRunMemory::parts(const std::string& category) const {
  const std::string prefix = category + ": ";
  std::vector<std::pair<std::string, size_t>> found;
  for (const auto* usage : {&device, &wire}) {
    for (const Arena::CategoryUsage& c : *usage) {
      if (c.category.rfind(prefix, 0) != 0) continue;
      const std::string name = c.category.substr(prefix.size());
      bool known = false;
      for (const auto& [n, bytes] : found) known = known || n == name;
      if (!known) found.push_back({name, peak(c.category)});
    }
  }
  return found;
}

DryRunMemory dry_run(const DryRunSetup& s) {
  const int world_size = s.nodes * s.ranks_per_node, p = s.pipeline.stages;
  // The stage's first rank: ranks are ordered tensor, data, pipeline.
  const int rank = s.stage * (world_size / p);
  comm::DryCommunicator world(comm::Topology{world_size, rank, s.ranks_per_node, false});
  const ParallelGroups groups(world, s.tensor_parallel, p, s.pipeline.virtual_stages(s.model));
  const std::optional<ZeroEngine::Pipeline> pipeline = pipeline_stage(s.pipeline, groups);
  ZeroConfig zero = s.zero;
  zero.offload.optimizer =
      zero.offload.optimizer == OffloadDevice::kNvme ? OffloadDevice::kNone : zero.offload.optimizer;
  zero.offload.param = zero.offload.param == OffloadDevice::kNvme ? OffloadDevice::kNone : zero.offload.param;
  zero.record_events = false;
  DryOps ops;
  ZeroEngine engine(s.model, zero, s.micro_batch, groups.data(), 0, &ops, groups.tensor(),
                    pipeline ? &*pipeline : nullptr);
  // Token ids are never read (the ops compute nothing); the engine only needs the host arrays.
  const size_t tokens = size_t(s.micro_batch) * s.model.seq_len;
  const std::vector<int32_t> ids(tokens, 0);
  const std::vector<int64_t> windows(size_t(s.micro_batch), 0);
  const std::vector<ZeroEngine::MicroBatch> micro_batches(size_t(s.accumulation_steps),
                                                          {ids.data(), ids.data(), windows.data()});
  std::vector<size_t> before;
  for (int step = 0; step < kMaxSteps; ++step) {
    engine.train_step(micro_batches, 0.0);
    std::vector<size_t> after = peaks_of(engine);
    if (step > 0 && after == before) break;
    before = std::move(after);
  }
  return {engine.device_arena().usage_by_category(), engine.wire_arena().usage_by_category(),
          engine.activation_bytes()};
}

}  // namespace gpt
