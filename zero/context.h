// What the engine's parts share to hold and compute on state: the device seam's backend, the arena of device
// memory (model state, gradients, activations), the arena of wire memory (what the communicator sends and
// receives; ops may read and write it too, see kernels/ops.h) and the event log.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "kernels/mixed_precision.h"
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

  // Call before handing wire memory to `comm`. An asynchronous backend (a GPU stream) may still be writing a
  // send buffer, or have yet to read a buffer the communicator is about to overwrite. A communicator that
  // works on the host (MPI) sees neither, so every op issued so far must finish first (a CPU backend has
  // nothing pending); one that orders its operations after the device work issued before them (NCCL on the
  // backend's stream, comm::Communicator::orders_after_device_work) needs no wait from the host.
  void before_communication(const comm::Communicator& comm) const {
    if (!comm.orders_after_device_work()) ops.synchronize();
  }
};

// A buffer of wire memory, grown to the largest use, where device tensors are staged for a communicator: the
// communicator reads and writes wire memory only (pinned host memory for MPI on a GPU, device memory for
// NCCL; on the CPU backend both are host memory and the copies are memcpy). Its arena category is
// "buffers: " + name.
class WireStaging {
 public:
  WireStaging(const EngineContext& context, std::string name) : context_(context), name_(std::move(name)) {}
  ~WireStaging() {
    if (data_) context_.wire.release(data_);
  }
  WireStaging(WireStaging&& other) noexcept
      : context_(other.context_), name_(std::move(other.name_)), data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  WireStaging(const WireStaging&) = delete;
  WireStaging& operator=(const WireStaging&) = delete;
  WireStaging& operator=(WireStaging&&) = delete;

  // The buffer as n elements of dtype.
  Tensor view(int64_t n, DType dtype) {
    const size_t bytes = dtype_bytes(dtype, n);
    if (bytes > bytes_) {
      if (data_) context_.wire.release(data_);
      data_ = context_.wire.allocate(name_, "buffers: " + name_, bytes);
      bytes_ = bytes;
    }
    return context_.view(data_, n, dtype);
  }

 private:
  EngineContext context_;
  std::string name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The dtype the layer loop computes in for compute weights of `precision`: fp32 for fp32/fp16/bf16, fp64 for
// fp64 (the double-precision gradient checks). Gradients are reduced in it too (comm::accumulation_dtype).
inline DType loop_dtype(DType precision) {
  return comm::accumulation_dtype(precision);
}
// The layer loop's compute dtype (LayerLoop, model/loop.h) for a run at `precision` on a backend whose
// Ops::compute_dtype(precision) is `backend_compute`: that dtype where it is fp16 or bf16 (the half layer
// loop: CUDA at --bf16/--fp16; its tensor-parallel collectives and pipeline boundary messages move fp16/bf16
// activations, as Megatron's), else loop_dtype(precision). The engine and the planner's GPU count
// (train/planner.cc) both follow it.
inline DType layer_loop_compute(DType precision, DType backend_compute) {
  return is_half(backend_compute) ? backend_compute : loop_dtype(precision);
}
// The engine's sources and sinks refuse a loop of another dtype.
inline void require_loop_dtype(DType precision, DType loop) {
  if (loop_dtype(precision) != loop) {
    throw std::invalid_argument(std::string("a layer loop in ") + dtype_name(loop) +
                                " cannot use compute weights in " + dtype_name(precision));
  }
}

}  // namespace gpt
