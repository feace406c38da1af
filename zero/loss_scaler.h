// Dynamic fp16 loss scaling with DeepSpeed's semantics and defaults: start at 2^initial_scale_power; on an
// overflow anywhere, skip the step and, once `hysteresis` overflows have used up the tolerance, halve the
// scale (never below min_loss_scale); after loss_scale_window steps without overflow since the last one,
// double it and restore the hysteresis. A fixed scale (loss_scale > 0) never changes; bf16 and fp32 use 1.
#pragma once

#include <cstdint>

namespace gpt {

struct LossScalerConfig {
  double loss_scale = 0;  // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1;
};

class LossScaler {
 public:
  // dynamic false: a constant scale of config.loss_scale (or 1 when that is 0, as for bf16/fp32).
  LossScaler(const LossScalerConfig& config, bool dynamic);

  double scale() const { return scale_; }
  // Call once per optimizer step with whether any rank saw a non-finite gradient.
  void update(bool overflow);

  // State that a checkpoint must carry for an exact resume.
  struct State {
    double scale;
    int hysteresis_left;
    int64_t iteration;
    int64_t last_overflow_iteration;
  };
  State state() const { return {scale_, hysteresis_left_, iteration_, last_overflow_iteration_}; }
  void restore(const State& s);

 private:
  LossScalerConfig config_;
  bool dynamic_;
  double scale_;
  int hysteresis_left_;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
};

}  // namespace gpt
