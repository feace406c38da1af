// LossScaler: DeepSpeed's DynamicLossScaler rules (non-consecutive hysteresis); see loss_scaler.h.
#include "zero/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace gpt {

LossScaler::LossScaler(const LossScalerConfig& config, bool dynamic)
    : config_(config),
      dynamic_(dynamic),
      scale_(dynamic ? std::ldexp(1.0, config.initial_scale_power)
                     : (config.loss_scale > 0 ? config.loss_scale : 1)),
      hysteresis_left_(config.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    // Hysteresis: tolerate `hysteresis - 1` overflows before lowering the scale.
    if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
      scale_ = std::max(scale_ / 2, config_.min_loss_scale);
    } else {
      hysteresis_left_ -= 1;
    }
    last_overflow_iteration_ = iteration_;
  } else if ((iteration_ - last_overflow_iteration_) % config_.loss_scale_window == 0) {
    hysteresis_left_ = config_.hysteresis;
    scale_ *= 2;
  }
  iteration_ += 1;
}

void LossScaler::restore(const State& s) {
  scale_ = s.scale;
  hysteresis_left_ = s.hysteresis_left;
  iteration_ = s.iteration;
  last_overflow_iteration_ = s.last_overflow_iteration;
}

}  // namespace gpt
