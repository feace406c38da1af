// What the engine's parts share to hold and compute on state: the device seam's backend, the arena of device
// memory (model state, gradients, activations), the arena of wire memory (what the communicator sends and
// receives; ops may read and write it too, see kernels/ops.h) and the event log.
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "tensor/arena.h"
#include "zero/events.h"

namespace gpt {

struct EngineContext {
  Ops& ops;
  Arena& device;
  Arena& wire;
  EventLog& events;

  // A view of n elements of dtype at data, on the backend's device (wire memory is viewed the same way: ops
  // accept both).
  Tensor view(void* data, int64_t n, DType dtype) const { return Tensor{data, {n}, dtype, ops.device()}; }
  Tensor view(const void* data, int64_t n, DType dtype) const {
    return view(const_cast<void*>(data), n, dtype);
  }
};

// The layer loop computes in fp32 for fp32/fp16/bf16 compute weights, and in fp64 for fp64 ones (the
// double-precision gradient checks); the engine's sources and sinks refuse any other pairing.
inline void require_loop_dtype(DType precision, DType loop) {
  if ((precision == DType::kF64) != (loop == DType::kF64)) {
    throw std::invalid_argument(std::string("a layer loop in ") + dtype_name(loop) +
                                " cannot use compute weights in " + dtype_name(precision));
  }
}

}  // namespace gpt
