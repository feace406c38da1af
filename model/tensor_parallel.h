// Tensor parallelism as the model sees it (Megatron): a group of t ranks computes each block together, each
// rank holding its slice of the weights (params.h, TensorSlice) and of the activations, and exchanging
// activations through the collectives of a TensorGroup. The model never sees a communicator: whoever builds
// the loop implements TensorGroup over one (zero/ does, over the ranks of a tensor-parallel group, metering
// every byte in the phase the call names).
//
// Without sequence parallelism every rank holds the whole residual stream [B,T,C]; the row-parallel layers'
// partial outputs are all-reduced (forward), and so are the column-parallel layers' input gradients
// (backward). With it, the residual stream, the LayerNorms and the dropouts are split along the sequence
// (each rank T/t positions of every sequence): an all-gather of the LayerNorm output before each
// column-parallel layer and a reduce-scatter after each row-parallel one replace the all-reduces, and the
// backward does the reverse. The dropout masks stay keyed by global indices, so any t draws those of t = 1.
#pragma once

#include "model/params.h"
#include "tensor/tensor.h"

namespace gpt {

// Which step of training a collective serves (the meter's phases tp_fwd, tp_bwd and act_gather).
enum class TensorTraffic {
  kForward,           // the forward pass
  kBackward,          // the backward pass, including the recomputation's repeated collectives
  kActivationGather,  // partitioned activation checkpoints gathered for the recomputation
};

// The collectives of a tensor-parallel group over device tensors of the loop's backend. Every rank calls
// them in the same order with tensors of the same shapes.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // x = the sum of every rank's x, in place (fp32 or fp64 data).
  virtual void all_reduce(const Tensor& x, TensorTraffic traffic) = 0;
  // out [size * n] = the ranks' x [n] in rank order.
  virtual void all_gather(const Tensor& out, const Tensor& x, TensorTraffic traffic) = 0;
  // out [n] = part rank() of the sum over the ranks of x [size * n].
  virtual void reduce_scatter(const Tensor& out, const Tensor& x, TensorTraffic traffic) = 0;
};

// What the layers need to know about tensor parallelism: the group (null when t = 1), whether the sequence
// is split too, which traffic the collectives serve now (the loop sets it per pass), and sequence
// parallelism's buffers (the loop allocates them).
struct TensorParallel {
  TensorGroup* group = nullptr;
  bool sequence_parallel = false;
  // Partitioned activation checkpoints (Megatron's --distribute-saved-activations, ZeRO-R's Pa): with full
  // recomputation and without sequence parallelism, each rank keeps 1/t of every checkpointed block input
  // and the group all-gathers it (kActivationGather) before the chunk is recomputed.
  bool distribute_saved_activations = false;
  TensorTraffic traffic = TensorTraffic::kForward;
  // Sequence parallelism: [B,T,C] for a gathered LayerNorm output (or gradient) and for a row-parallel
  // layer's partial output (or a column-parallel layer's partial input gradient); [2C] for a LayerNorm's
  // partial parameter gradients, summed over the group.
  Tensor gathered, partial, norm_grads;

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  TensorSlice slice() const { return {size(), rank()}; }
  // Positions of each sequence this rank holds in the residual stream: T, or T/t with sequence parallelism.
  int local_positions(int T) const { return sequence_parallel ? T / size() : T; }
};

}  // namespace gpt
