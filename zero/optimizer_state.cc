// The two homes of a rank's optimizer state; see optimizer_state.h.
#include "zero/optimizer_state.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "zero/swapped_optimizer.h"

namespace gpt {

namespace {

// In device memory the update needs no walk: the whole shard is one group, one AdamW pass over each owned
// range.
class ResidentOptimizerState final : public OptimizerState {
 public:
  explicit ResidentOptimizerState(const OptimizerStateParts& p)
      : context_(p.context), weights_(p.weights), total_(p.partition.shard_total()) {
    const size_t bytes = size_t(total_) * sizeof(float);
    master_ = static_cast<float*>(context_.device.allocate("fp32 master weights", "master", bytes));
    m_ = static_cast<float*>(context_.device.allocate("Adam first moment", "moments", bytes));
    v_ = static_cast<float*>(context_.device.allocate("Adam second moment", "moments", bytes));
    // The host sees the state a chunk at a time: at most a sub-group's worth of each array.
    chunk_ = std::max<int64_t>(1, std::min(total_, p.config.offload.sub_group_size));
  }
  void update(const Visit& step, const UpdateFirst* first) override {
    if (!first) {
      const SubGroup all{0, total_, {}};
      const Tensor compute = weights_.rounding_target(all);
      if (compute.empty()) {
        step(all, master_, m_, v_, compute);
        return refresh_weights();
      }
      return weights_.refresh_rounded([&] { step(all, master_, m_, v_, compute); });
    }
    SubGroupRefresh<float>* refresh = weights_.by_sub_group();
    if (!refresh) throw std::logic_error("an update in two parts needs stage 3's weight source");
    auto update_range = [&](int64_t begin, int64_t end) {
      if (begin >= end) return;
      const SubGroup group{begin, end, {}};
      const Tensor compute = weights_.rounding_target(group);
      step(group, master_ + begin, m_ + begin, v_ + begin, compute);
      if (compute.empty()) refresh->refresh_group(master_ + begin, group);
    };
    refresh->refresh_begin();
    update_range(first->begin, first->end);
    first->then();
    update_range(0, first->begin);
    update_range(first->end, total_);
    refresh->refresh_done();
  }
  void refresh_weights() override { weights_.refresh(master_); }
  void stream(bool overwrite, const HostChunk& visit) override;

 private:
  const EngineContext& context_;
  EngineWeights<float>& weights_;
  int64_t total_;  // the shard's elements
  int64_t chunk_;  // the most elements of each array the host holds at once
  float* master_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

void ResidentOptimizerState::stream(bool overwrite, const HostChunk& visit) {
  std::vector<float> host(3 * size_t(chunk_));
  float* state[3] = {master_, m_, v_};
  for (int64_t begin = 0; begin < total_; begin += chunk_) {
    const int64_t n = std::min(chunk_, total_ - begin);
    float* arrays[3] = {host.data(), host.data() + n, host.data() + 2 * n};
    auto device = [&](int a) { return context_.view(state[a] + begin, n, DType::kF32); };
    if (overwrite) {
      std::fill(host.begin(), host.end(), 0.0f);
    } else {
      for (int a = 0; a < 3; ++a) context_.ops.download(arrays[a], device(a));
    }
    visit(begin, n, arrays[0], arrays[1], arrays[2]);
    if (overwrite) {
      for (int a = 0; a < 3; ++a) context_.ops.upload(device(a), arrays[a]);
    }
  }
}

// Sub-group by sub-group as the swapper brings them in: each group is updated, then rounded into the compute
// weights while the next ones are read.
class SwappedOptimizerState final : public OptimizerState {
 public:
  SwappedOptimizerState(OffloadStore& store, const EngineWeights<float>& targets,
                        SubGroupRefresh<float>& weights)
      : swapped_(store), targets_(targets), weights_(weights) {}
  void update(const Visit& step, const UpdateFirst* first) override {
    if (first) throw std::logic_error("the swapped optimizer state updates its sub-groups in their order");
    weights_.refresh_begin();
    swapped_.for_each_group(SwappedOptimizer::Mode::kUpdate,
                            [&](const SubGroup& g, float* master, float* m, float* v) {
                              const Tensor compute = targets_.rounding_target(g);
                              step(g, master, m, v, compute);
                              if (compute.empty()) weights_.refresh_group(master, g);
                            });
    weights_.refresh_done();
  }
  void refresh_weights() override {
    weights_.refresh_begin();
    swapped_.for_each_group(
        SwappedOptimizer::Mode::kRead,
        [&](const SubGroup& g, float* master, float*, float*) { weights_.refresh_group(master, g); });
    weights_.refresh_done();
  }
  void stream(bool overwrite, const HostChunk& visit) override {
    const auto mode = overwrite ? SwappedOptimizer::Mode::kOverwrite : SwappedOptimizer::Mode::kRead;
    swapped_.for_each_group(mode, [&](const SubGroup& g, float* master, float* m, float* v) {
      visit(g.begin, g.size(), master, m, v);
    });
  }

 private:
  SwappedOptimizer swapped_;
  const EngineWeights<float>& targets_;  // the same source as weights_
  SubGroupRefresh<float>& weights_;
};

}  // namespace

std::unique_ptr<OptimizerState> make_optimizer_state(const OptimizerStateParts& parts) {
  if (!parts.config.offload.optimizer_on_nvme()) return std::make_unique<ResidentOptimizerState>(parts);
  SubGroupRefresh<float>* by_group = parts.weights.by_sub_group();
  if (!by_group || !parts.offload) {
    throw std::invalid_argument("offload_optimizer \"nvme\" needs ZeRO stage 3 and its swap files");
  }
  return std::make_unique<SwappedOptimizerState>(*parts.offload, parts.weights, *by_group);
}

}  // namespace gpt
