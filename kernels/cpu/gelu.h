// GELU with GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstdint>

namespace gpt::cpu {

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n);

// Accumulates: dinp += gelu'(inp) * dout.
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n);

}  // namespace gpt::cpu
