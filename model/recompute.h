// Activation recomputation, with Megatron's meanings (--recompute-granularity, --recompute-method,
// --recompute-num-layers): what the one layer loop keeps between a block's forward and its backward, and what
// it computes again.
//   - none: every block keeps all its activations.
//   - selective: every block keeps its activations except the attention core's (the probabilities
//     softmax(QK^T) [B,NH,T,T], from which the attention dropout's mask is regenerated; a backend keeping
//     the log-sum-exp, Ops::attention_residual, has [B,NH,T] there, shared and recomputed the same way): the
//     backward recomputes them from the block's kept qkv, one block at a time. They are 5as^2b of the paper's
//     sbh(34 + 5as/h) bytes per layer, the part that grows with the sequence squared, for a few percent of
//     the compute.
//   - full: only the inputs of chunks of blocks are kept; the backward recomputes a chunk's whole forward.
//       uniform N: chunks of N consecutive blocks (the last may be shorter): blocks 0..N-1, N..2N-1, ...
//       block N:   blocks 0..N-1 are each their own chunk, blocks N..L-1 keep all their activations.
//     uniform 1 is the classic per-block activation checkpointing (--checkpoint-activations).
//     checkpoints_on_host (DeepSpeed's cpu_checkpointing): the kept chunk inputs live in host memory, copied
//     there after the forward computes them and back before their chunk is recomputed; meant for a backend
//     whose device memory is not host memory (the trainer sets it on CUDA only).
// Recomputation replays the forward's arithmetic and dropout masks exactly, so the loss and the gradients
// are bit for bit those without recomputation.
#pragma once

#include <algorithm>
#include <string>

namespace gpt {

enum class RecomputeGranularity { kNone, kSelective, kFull };
enum class RecomputeMethod { kUniform, kBlock };

struct Recompute {
  RecomputeGranularity granularity = RecomputeGranularity::kNone;
  RecomputeMethod method = RecomputeMethod::kUniform;  // full only
  int num_layers = 1;                                  // full only: N of the method
  bool checkpoints_on_host = false;                    // full only: see above

  static Recompute full(RecomputeMethod method = RecomputeMethod::kUniform, int num_layers = 1) {
    return {RecomputeGranularity::kFull, method, num_layers};
  }
  static Recompute selective() { return {RecomputeGranularity::kSelective}; }

  bool is_full() const { return granularity == RecomputeGranularity::kFull; }
  bool is_selective() const { return granularity == RecomputeGranularity::kSelective; }

  // Full recomputation: the chunk of blocks [first, last] recomputed together with block `layer` (of
  // `layers`), or first > last when that block keeps its activations.
  struct Chunk {
    int first = 0, last = -1;
    bool empty() const { return first > last; }
    int size() const { return last - first + 1; }
  };
  Chunk chunk(int layer, int layers) const {
    if (!is_full()) return {};
    if (method == RecomputeMethod::kBlock) return layer < num_layers ? Chunk{layer, layer} : Chunk{};
    const int first = layer / num_layers * num_layers;
    return {first, std::min(first + num_layers, layers) - 1};
  }
  // The chunk of block `layer` when the chunks are counted over the layers [first, first + layers) (a
  // pipeline chunk's own, as Megatron counts them in each stage): chunk(layer - first, layers), moved there.
  Chunk chunk_within(int layer, int first, int layers) const {
    Chunk c = chunk(layer - first, layers);
    if (!c.empty()) c.first += first, c.last += first;
    return c;
  }
  // Blocks recomputed together at most (the block activation sets the backward needs for a chunk).
  int longest_chunk(int layers) const {
    if (!is_full()) return 0;
    return method == RecomputeMethod::kBlock ? (num_layers > 0 ? 1 : 0) : std::min(num_layers, layers);
  }

  // "none", "selective", "full (uniform, 2 layers)": for banners and reports.
  std::string describe() const {
    if (!is_full()) return is_selective() ? "selective" : "none";
    return std::string("full (") + (method == RecomputeMethod::kUniform ? "uniform" : "block") + ", " +
           std::to_string(num_layers) + (num_layers == 1 ? " layer" : " layers") +
           (checkpoints_on_host ? ", checkpoints in host memory)" : ")");
  }
};

}  // namespace gpt
