// Incremental decoding with a key/value cache, for sampling (gpt_generate). The full forward recomputes every
// position of the window for each new token; the decoder keeps each block's qkv rows of the tokens so far
// (the cache) and runs one new token through the model per step: its embedding at the next position, each
// block with attention over the cached rows (block_decode), the final LayerNorm and the tied output
// projection of that one row. A step costs one row of every layer instead of a whole window.
//
// Positions are absolute: a sequence holds at most capacity() <= config.max_positions tokens. Whoever needs a
// longer context slides a window over it and must re-run (reset, then step) the window's tokens, because
// every cached row depends on its position.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/params.h"
#include "tensor/arena.h"
#include "tensor/tensor.h"

namespace gpt {

template <typename Real>
class Decoder {
 public:
  // The cache for sequences of up to `capacity` tokens (at most config.max_positions; 0 means that many) and
  // one row's activations, from `arena` over the memory of `ops`' device.
  Decoder(const GPTConfig& config, Ops& ops, Arena& arena, int capacity = 0);

  // Forgets the sequence: the next step is position 0.
  void reset() { length_ = 0; }
  int length() const { return length_; }
  int capacity() const { return capacity_; }

  // Appends token at position length() and returns the logits for the token after it: [1, Vp] on the
  // device, of which the first config.vocab are real. params: the whole model on the device (params.h
  // layout). Throws std::logic_error when the sequence is full.
  const Tensor& step(const Real* params, int32_t token);

 private:
  GPTConfig config_;
  ParamTable table_;
  Ops& ops_;
  Tensor token_;                   // [1, 1] int32
  Tensor x_, y_;                   // [1, 1, C]: a block's input and output, swapped after each block
  std::vector<Tensor> qkv_cache_;  // per block: [capacity, 3C]
  DecodeActivations acts_;
  HeadActivations head_;  // B = T = 1: the logits in head_.probs
  int capacity_;
  int length_ = 0;
};

}  // namespace gpt
