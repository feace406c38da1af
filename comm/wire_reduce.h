// Element-wise arithmetic of the reductions on wire data (fp32, fp16 or bf16 bits): every addition is done in
// fp32 and a partial sum is rounded once, to the wire dtype, just before it is sent on. fp64 data (the
// double-precision gradient checks) is added in fp64. Shared by the ring algorithms of every host-side
// backend.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace gpt::comm {

// True for the dtypes a reduction can travel in: kF32, kF16, kBF16 and kF64.
bool is_reducible(DType dtype);

// out[i] = to_wire(from_wire(partial[i]) + from_wire(own[i])); out may alias partial.
void add_to_wire(const void* partial, const void* own, void* out, DType dtype, size_t n);

// out[i] = (from_wire(partial[i]) + from_wire(own[i])) * scale, out in the accumulation dtype; out may alias
// own.
void add_final(const void* partial, const void* own, void* out, float scale, DType dtype, size_t n);

// out[i] = from_wire(in[i]) * scale, out in the accumulation dtype; out may alias in.
void widen_scaled(const void* in, void* out, float scale, DType dtype, size_t n);

// out[i] = to_wire(in[i]), in in the accumulation dtype (round to nearest even for fp16/bf16).
void narrow_to_wire(const void* in, void* out, DType dtype, size_t n);

}  // namespace gpt::comm
