// Learning-rate schedules: Megatron's (--lr-decay-style constant|linear|cosine with --lr-warmup-iters,
// --lr-decay-iters, --min-lr) and DeepSpeed's JSON schedulers (WarmupLR, WarmupDecayLR, WarmupCosineLR), as
// one function of the number of applied optimizer steps (a skipped step does not advance it).
#pragma once

#include <cstdint>
#include <string>

namespace gpt {

struct LrSchedule {
  enum class Kind { kMegatron, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
  Kind kind = Kind::kMegatron;
  // Megatron: linear warmup from 0 to lr over warmup steps, then decay to min_lr by decay_steps.
  std::string decay_style = "constant";  // constant | linear | cosine
  double lr = 6e-4, min_lr = 0;
  int64_t warmup_steps = 0, decay_steps = 0;
  // DeepSpeed: WarmupLR/WarmupDecayLR warm from warmup_min_lr to warmup_max_lr ("log" or "linear"), then hold
  // (WarmupLR) or fall linearly to 0 at total_num_steps (WarmupDecayLR). WarmupCosineLR scales the
  // optimizer's lr by a ratio: warmup_min_ratio -> 1, then a cosine down to cos_min_ratio at total_num_steps.
  std::string warmup_type = "log";
  double warmup_min_lr = 0, warmup_max_lr = 1e-3;
  double warmup_min_ratio = 0, cos_min_ratio = 1e-4;
  int64_t total_steps = 0;

  // The learning rate of the optimizer step that follows `applied` applied steps (0-based).
  double at(int64_t applied) const;
  std::string describe() const;
};

}  // namespace gpt
