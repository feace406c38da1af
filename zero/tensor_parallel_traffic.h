// The bytes a training step's tensor-parallel collectives move, in closed form: what the traffic meter
// should count in tp_fwd, tp_bwd and act_gather for a configuration, derived from the collectives that
// model/layers.cc issues and the passes model/loop.cc runs (zero/traffic_model.h does the same for the ZeRO
// phases). The start-up banner and the planner (--plan) print it for configurations they do not run.
//
// Collectives over the t ranks of one group (the communicator's rings; any element count, the chunks of an
// all-reduce being ceil(n/t) elements with the last ones shorter or empty), in bytes summed over the ranks:
//   all-reduce of n elements:             2 (t-1) n e   (a reduce-scatter ring, then an all-gather ring)
//   all-gather of n elements per rank:    t (t-1) n e
//   reduce-scatter to n elements per rank: t (t-1) n e
// with e the bytes of the layer loop's activations (TensorTrafficInput::activations: 4 in the fp32 loop, 2
// in the half loop), and of their statistics dtype (kernels/mixed_precision.h: 4 beside half activations) for
// the vocabulary-parallel head's softmax statistics and LayerNorm's parameter-gradient partials.
//
// Assumptions the callers should know:
// - Tensor-parallel groups are consecutive ranks inside one node (our rule), so every byte is intra-node.
// - A step is k micro-steps of one forward and one backward each; evaluation passes are not counted (their
//   collectives also run in tp_fwd: take the meter's counts of a step without evaluation).
// - Partitioned activation checkpoints (distribute_saved_activations, with full recomputation only): each
//   rank keeps 1/t of every checkpointed chunk input [B,T,C] and the group all-gathers it (act_gather) once
//   per chunk the backward recomputes, before the recomputation. With sequence parallelism the kept input
//   already is this rank's T/t positions, so nothing is gathered. Without recomputation, or with selective
//   recomputation, nothing is checkpointed and nothing is gathered.
#pragma once

#include "comm/traffic.h"
#include "model/config.h"
#include "model/recompute.h"
#include "tensor/tensor.h"

namespace gpt {

struct TensorTrafficInput {
  GPTConfig model;
  int micro_batch = 1;         // B: sequences per micro-step on each rank of a group
  int accumulation_steps = 1;  // k: micro-steps per optimizer step
  int tensor_parallel = 1;     // t: ranks of one tensor-parallel group
  int data_parallel = 1;       // d: the number of tensor-parallel groups (the world is t x d ranks)
  bool sequence_parallel = false;
  Recompute recompute;
  bool distribute_saved_activations = false;  // Megatron's --distribute-saved-activations
  DType activations = DType::kF32;            // the layer loop's compute dtype (LayerLoop::compute_dtype)
};

// Expected payload bytes of one optimizer step, summed over all t x d ranks: [phase][link] as in
// comm::TrafficCounts, nonzero only in tp_fwd, tp_bwd (the backward's collectives and full recomputation's
// repeated forward collectives) and act_gather, all intra-node; wait_ms is zero. All zero when t = 1.
// Throws std::invalid_argument when a size is not positive, t does not divide the hidden size, or with
// sequence parallelism the sequence length.
comm::TrafficCounts expected_tensor_parallel_traffic(const TensorTrafficInput& input);

}  // namespace gpt
