// LrSchedule::at; see lr_schedule.h.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace gpt {
namespace {

constexpr double kPi = 3.14159265358979323846;

// DeepSpeed's warmup fraction: log(step + 1) / log(warmup) ("log") or step / warmup ("linear"), 1 after.
double warmup_gamma(const std::string& type, int64_t step, int64_t warmup) {
  if (step >= warmup || warmup <= 0) return 1.0;
  if (type == "linear") return double(step) / double(warmup);
  return warmup > 1 ? std::log(double(step + 1)) / std::log(double(warmup)) : 1.0;
}

}  // namespace

double LrSchedule::at(int64_t step) const {
  switch (kind) {
    case Kind::kMegatron: {
      if (warmup_steps > 0 && step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
      if (decay_style == "constant") return lr;
      const int64_t decay_end = decay_steps > 0 ? decay_steps : 0;
      if (step >= decay_end) return min_lr;
      const double ratio =
          double(step - warmup_steps) / double(std::max<int64_t>(1, decay_end - warmup_steps));
      const double coefficient = decay_style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(kPi * ratio) + 1.0);
      return min_lr + (lr - min_lr) * coefficient;
    }
    case Kind::kWarmupLR:
      return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * warmup_gamma(warmup_type, step, warmup_steps);
    case Kind::kWarmupDecayLR: {
      if (step < warmup_steps) {
        return warmup_min_lr +
               (warmup_max_lr - warmup_min_lr) * warmup_gamma(warmup_type, step, warmup_steps);
      }
      const double left =
          double(total_steps - step) / double(std::max<int64_t>(1, total_steps - warmup_steps));
      return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * std::max(0.0, left);
    }
    case Kind::kWarmupCosineLR: {
      if (step < warmup_steps) {
        return lr *
               (warmup_min_ratio + (1 - warmup_min_ratio) * warmup_gamma(warmup_type, step, warmup_steps));
      }
      const double progress = std::min(
          1.0, double(step - warmup_steps) / double(std::max<int64_t>(1, total_steps - warmup_steps)));
      return lr * (cos_min_ratio + (1 - cos_min_ratio) * 0.5 * (1 + std::cos(kPi * progress)));
    }
  }
  return lr;
}

std::string LrSchedule::describe() const {
  std::ostringstream out;
  switch (kind) {
    case Kind::kMegatron:
      out << "lr " << lr << ", " << decay_style << " decay";
      if (decay_style != "constant") out << " to " << min_lr << " by step " << decay_steps;
      if (warmup_steps > 0) out << ", linear warmup " << warmup_steps << " steps";
      break;
    case Kind::kWarmupLR:
      out << "WarmupLR " << warmup_min_lr << " -> " << warmup_max_lr << " over " << warmup_steps << " steps ("
          << warmup_type << ")";
      break;
    case Kind::kWarmupDecayLR:
      out << "WarmupDecayLR " << warmup_min_lr << " -> " << warmup_max_lr << " over " << warmup_steps
          << " steps (" << warmup_type << "), linear to 0 at step " << total_steps;
      break;
    case Kind::kWarmupCosineLR:
      out << "WarmupCosineLR lr " << lr << ", ratio " << warmup_min_ratio << " -> 1 over " << warmup_steps
          << " steps (" << warmup_type << "), cosine to " << cos_min_ratio << " at step " << total_steps;
      break;
  }
  return out.str();
}

}  // namespace gpt
