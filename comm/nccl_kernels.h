// Internal to the NCCL communicator: the element-wise steps around NCCL's reductions, enqueued on the
// communicator's stream. NCCL sums in the wire dtype; these widen the sum to the accumulation dtype and apply
// the scale, with tensor/half.h's exact conversions (the same rounding as the CPU and the MPI backend).
// Pointers are device pointers or mapped pinned host pointers. Return the launch status (cudaGetLastError).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpt::comm::nccl_kernels {

// The wire dtypes a reduction travels in (gpt::DType's reducible ones; nvcc never sees tensor/tensor.h).
enum class Wire { kF32, kF16, kBF16, kF64 };

// out[i] = from_wire(in[i]) * scale; out is fp32 (fp64 for kF64, scaled in fp64). out must not overlap in
// unless it is in itself (kF32 and kF64).
cudaError_t widen_scaled(const void* in, void* out, Wire wire, float scale, size_t n, cudaStream_t stream);

// data[i] = to_wire(from_wire(data[i]) * scale), the product in fp32 (fp64 for kF64), rounded to nearest
// even.
cudaError_t rescale_in_place(void* data, Wire wire, float scale, size_t n, cudaStream_t stream);

}  // namespace gpt::comm::nccl_kernels
