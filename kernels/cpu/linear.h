// Fully connected layer as a GEMM (Eigen), weights stored [OC, C] row-major as in PyTorch/llm.c.
#pragma once

namespace gpt::cpu {

// out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC]. bias may be null. Overwrites out.
template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC);

// Accumulates: dinp[N,C] += dout * weight; dweight[OC,C] += dout^T * inp; dbias[OC] += column sums of dout.
// dinp and dbias may be null (not needed / no bias).
template <typename Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int C, int OC);

}  // namespace gpt::cpu
