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

// Memory-centric tiling: one tile of the layer, the output features [first, first + W) of OC, from only the
// tile's weight rows (weight [W,C]) and bias entries (bias [W], may be null); out and dout are the whole
// layer's [N,OC] (row stride OC), of which only columns [first, first + W) are read or written.

// out[:, first:first+W] = inp * weight^T + bias, every value bit for bit what linear_forward with the whole
// weight writes there at the current OpenMP thread count: Eigen's GEMM rounds an output column differently
// depending on where it sits in a call, and these calls put each column where linear_forward's did. Throws
// std::invalid_argument when that cannot be done inside the tile; never when OC, first and W are multiples
// of 16 and W >= 2 of Eigen's packets (32 floats or 16 doubles with AVX-512, 16 / 8 with AVX2).
template <typename Real>
void linear_forward_columns(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C,
                            int OC, int first, int W);

// Accumulates the tile's gradients: dweight[W,C] += dout[:, first:first+W]^T * inp and dbias[W] += its column
// sums (bit for bit what linear_backward adds to those rows when first and W are multiples of 16), and
// dinp[N,C] += dout[:, first:first+W] * weight, the tile's part of the input gradient. dinp and dbias may be
// null.
template <typename Real>
void linear_backward_columns(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                             const Real* weight, int N, int C, int OC, int first, int W);

}  // namespace gpt::cpu
