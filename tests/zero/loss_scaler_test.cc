// The dynamic loss scaler follows DeepSpeed's rules: hysteresis before halving, a floor, growth after a
// window of clean steps counted from the last overflow.
#include "zero/loss_scaler.h"

#include <doctest/doctest.h>

#include <initializer_list>

TEST_CASE("hysteresis delays the first halving, the window doubles, the floor holds") {
  gpt::LossScalerConfig config;
  config.initial_scale_power = 4;  // 16
  config.loss_scale_window = 3;
  config.hysteresis = 2;
  config.min_loss_scale = 4;
  gpt::LossScaler scaler(config, true);
  CHECK(scaler.scale() == 16);
  scaler.update(true);  // iteration 0: uses up the hysteresis
  CHECK(scaler.scale() == 16);
  scaler.update(true);  // iteration 1: halves
  CHECK(scaler.scale() == 8);
  scaler.update(false);  // iteration 2: 1 since the overflow at 1
  scaler.update(false);  // 3
  CHECK(scaler.scale() == 8);
  scaler.update(false);  // 4: (4 - 1) % 3 == 0 -> doubles and restores the hysteresis
  CHECK(scaler.scale() == 16);
  scaler.update(true);  // 5: hysteresis 2 -> 1, no change
  CHECK(scaler.scale() == 16);
  scaler.update(true);  // 6: halves
  scaler.update(true);  // 7: halves
  scaler.update(true);  // 8: would be 2, floor 4
  CHECK(scaler.scale() == 4);
}

TEST_CASE("a static scale never moves") {
  gpt::LossScalerConfig config;
  config.loss_scale = 128;
  gpt::LossScaler scaler(config, false);
  for (int i = 0; i < 5; ++i) scaler.update(i % 2 == 0);
  CHECK(scaler.scale() == 128);
  gpt::LossScaler unit(gpt::LossScalerConfig{}, false);
  CHECK(unit.scale() == 1);
}

TEST_CASE("state round-trips") {
  gpt::LossScaler a(gpt::LossScalerConfig{}, true);
  a.update(true);
  a.update(true);
  a.update(false);
  gpt::LossScaler b(gpt::LossScalerConfig{}, true);
  b.restore(a.state());
  for (bool overflow : {false, true, true, false}) {
    a.update(overflow);
    b.update(overflow);
    CHECK(a.scale() == b.scale());
  }
}
