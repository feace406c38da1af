// Residual connection: out = a + b.
#pragma once
#include <cstdint>

namespace gpt::cpu {

template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, int64_t n);

// Accumulates dout into both da and db.
template <typename Real>
void residual_backward(Real* da, Real* db, const Real* dout, int64_t n);

}  // namespace gpt::cpu
