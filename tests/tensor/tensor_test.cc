// Tensor and Buffer basics: sizes, views that must fit, alignment and zero-fill.
#include "tensor/tensor.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>

TEST_CASE("buffer views report sizes and refuse to overrun") {
  gpt::Buffer buffer(4 * 768 * 4);
  CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % 64 == 0);
  gpt::Tensor t = buffer.view({4, 768}, gpt::DType::kF32);
  CHECK(t.numel() == 3072);
  CHECK(t.nbytes() == buffer.size());
  CHECK(t.describe() == "f32[4, 768] on cpu");
  for (int i = 0; i < 3072; ++i) CHECK_EQ(t.as<float>()[i], 0.0f);
  CHECK(buffer.view({4, 768, 2}, gpt::DType::kF16).nbytes() == buffer.size());
  CHECK_THROWS_AS(buffer.view({4, 769}, gpt::DType::kF32), std::length_error);
}
