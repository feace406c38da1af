// Closed forms of the tensor-parallel collectives' traffic; see tensor_parallel_traffic.h. Each term names
// the collective of model/layers.cc it counts; the passes follow model/loop.cc.
#include "zero/tensor_parallel_traffic.h"

#include <stdexcept>
#include <string>

#include "kernels/mixed_precision.h"

namespace gpt {
namespace {

using comm::Link;
using comm::Phase;

// The bytes the t ranks of one group send together for each piece of one micro-step.
class GroupTraffic {
 public:
  explicit GroupTraffic(const TensorTrafficInput& in)
      : t_(uint64_t(in.tensor_parallel)),
        B_(uint64_t(in.micro_batch)),
        T_(uint64_t(in.model.seq_len)),
        C_(uint64_t(in.model.hidden)),
        L_(in.model.num_layers),
        e_(dtype_size(in.activations)),
        statistic_bytes_(dtype_size(statistics_dtype(in.activations))),
        sp_(in.sequence_parallel),
        recompute_(in.recompute),
        distribute_(in.distribute_saved_activations) {}

  // tp_fwd: LayerLoop::forward.
  uint64_t forward() const {
    uint64_t bytes = embed_forward();
    for (int l = 0; l < L_; ++l) bytes += block_forward(true);
    return bytes + head_forward();
  }

  // tp_bwd: LayerLoop::backward, with full recomputation's forwards: a chunk's inner blocks run their whole
  // forward again, and its last block its forward up to (not including) the MLP's row-parallel projection.
  uint64_t backward() const {
    uint64_t bytes = head_backward();
    for (int l = L_ - 1; l >= 0; --l) {
      const Recompute::Chunk chunk = recompute_.chunk(l, L_);
      if (!chunk.empty() && l == chunk.last) {
        for (int m = chunk.first; m < l; ++m) bytes += block_forward(true);
        bytes += block_forward(false);
      }
      bytes += block_backward();
    }
    return bytes + embed_backward();
  }

  // act_gather: partitioned activation checkpoints, one all-gather of the chunk's input [B,T,C] (B T C / t
  // elements per rank) per chunk the backward recomputes; none with sequence parallelism (the header).
  uint64_t activation_gathers() const {
    if (!distribute_ || sp_) return 0;
    uint64_t bytes = 0;
    for (int l = 0; l < L_; ++l) {
      const Recompute::Chunk chunk = recompute_.chunk(l, L_);
      if (!chunk.empty() && l == chunk.last) bytes += all_gather(B_ * T_ * C_ / t_, e_);
    }
    return bytes;
  }

 private:
  // The communicator's rings (header), in elements of e bytes.
  uint64_t all_reduce(uint64_t n, uint64_t e) const { return 2 * (t_ - 1) * n * e; }
  uint64_t all_gather(uint64_t per_rank, uint64_t e) const { return t_ * (t_ - 1) * per_rank * e; }
  uint64_t reduce_scatter(uint64_t per_rank) const { return t_ * (t_ - 1) * per_rank * e_; }

  // Sequence parallelism's gather_sequence and scatter_sequence: one collective per sequence of the
  // micro-batch, each rank holding T/t positions of C features.
  uint64_t gather_sequences() const { return B_ * all_gather(T_ / t_ * C_, e_); }
  uint64_t scatter_sequences() const { return B_ * reduce_scatter(T_ / t_ * C_); }

  // sum_over_group: the group's sum of partial [B,T,C] outputs (row-parallel linears, the vocabulary-parallel
  // embedding, the column-parallel input gradients): all-reduced, or reduce-scattered per sequence.
  uint64_t sum_over_group() const { return sp_ ? scatter_sequences() : all_reduce(B_ * T_ * C_, e_); }
  // full_sequence: a column-parallel layer's input (or gradient) gathered per sequence; nothing without
  // sequence parallelism (every rank holds the whole sequence).
  uint64_t full_sequence() const { return sp_ ? gather_sequences() : 0; }
  // norm_backward: with sequence parallelism a LayerNorm's partial parameter gradients [2C] are all-reduced.
  uint64_t norm_gradients() const { return sp_ ? all_reduce(2 * C_, statistic_bytes_) : 0; }

  // embed_forward: the vocabulary-parallel embedding's partial lookups summed.
  uint64_t embed_forward() const { return sum_over_group(); }

  // block_forward: qkv's input ln1 gathered, the attention projection's sum, fc's input ln2 gathered, and
  // (when the block's output is needed) the MLP projection's sum.
  uint64_t block_forward(bool need_output) const {
    uint64_t bytes = full_sequence() + sum_over_group() + full_sequence();
    if (need_output) bytes += sum_over_group();
    return bytes;
  }

  // head_forward: lnf gathered with sequence parallelism (kept for the backward's dwte), and the
  // vocabulary-parallel cross-entropy's softmax statistics [B*T, 3] all-gathered into [t, B*T, 3].
  uint64_t head_forward() const { return full_sequence() + all_gather(B_ * T_ * 3, statistic_bytes_); }

  // head_backward: the tied projection's partial dlnf summed, then lnf's parameter gradients.
  uint64_t head_backward() const { return sum_over_group() + norm_gradients(); }

  // block_backward, in its order: the MLP projection's output gradient gathered; fc's backward (its input ln2
  // gathered again, its input gradient summed); LayerNorm 2's parameter gradients; the attention
  // projection's output gradient gathered; qkv's backward (ln1 gathered again, its input gradient summed);
  // LayerNorm 1's parameter gradients. Selective recomputation's attention core is local.
  uint64_t block_backward() const {
    const uint64_t mlp = full_sequence() + (full_sequence() + sum_over_group()) + norm_gradients();
    const uint64_t attention = full_sequence() + (full_sequence() + sum_over_group()) + norm_gradients();
    return mlp + attention;
  }

  // embed_backward: the embedding's gradient gathered with sequence parallelism (each rank scatters every
  // token's gradient into its rows of wte).
  uint64_t embed_backward() const { return full_sequence(); }

  uint64_t t_, B_, T_, C_;
  int L_;
  uint64_t e_, statistic_bytes_;  // of an activation, of a statistic
  bool sp_;
  Recompute recompute_;
  bool distribute_;
};

void check_input(const TensorTrafficInput& in) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("expected_tensor_parallel_traffic: " + what);
  };
  if (in.micro_batch < 1 || in.accumulation_steps < 1 || in.tensor_parallel < 1 || in.data_parallel < 1)
    fail("micro-batch, accumulation steps, t and d must be positive");
  if (in.model.hidden % in.tensor_parallel != 0)
    fail("t = " + std::to_string(in.tensor_parallel) + " does not divide the hidden size " +
         std::to_string(in.model.hidden));
  if (in.sequence_parallel && in.model.seq_len % in.tensor_parallel != 0)
    fail("sequence parallelism needs t = " + std::to_string(in.tensor_parallel) +
         " to divide the sequence length " + std::to_string(in.model.seq_len));
}

}  // namespace

comm::TrafficCounts expected_tensor_parallel_traffic(const TensorTrafficInput& in) {
  check_input(in);
  comm::TrafficCounts counts;
  if (in.tensor_parallel == 1) return counts;  // no group, no collectives
  const GroupTraffic group(in);
  // Every micro-step runs the same passes, in each of the d groups.
  const uint64_t times = uint64_t(in.accumulation_steps) * uint64_t(in.data_parallel);
  counts.bytes[int(Phase::kTpFwd)][int(Link::kIntraNode)] = times * group.forward();
  counts.bytes[int(Phase::kTpBwd)][int(Link::kIntraNode)] = times * group.backward();
  counts.bytes[int(Phase::kActGather)][int(Link::kIntraNode)] = times * group.activation_gathers();
  return counts;
}

}  // namespace gpt
