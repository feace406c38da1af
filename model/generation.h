// The context rule of sampling (gpt_generate, bench/generate): the logits of the token after a text are the
// model's forward on its last min(length, W) tokens at positions 0, 1, ..., for a window W <= maxT. While the
// whole text fits in W, a key/value cache (decoder.h) runs one new token per step; once the text outgrows W
// the window slides, every cached row would change position, and each step runs the full forward over the
// window (as every step does without the cache): the window left-aligned and padded with token 0 on the
// right, which causal attention keeps out of every row that is read.
//
// On a device backend (gpt_generate --device cuda) the cached steps run there, on a copy of the weights in
// its memory, and the logits come back to the host; the sliding-window forward stays on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/decoder.h"
#include "model/model.h"
#include "tensor/arena.h"

namespace gpt {

class NextTokenLogits {
 public:
  // model: built for micro-batch 1 and seq_len W (the window), its params the weights; it must outlive this.
  // backend: where the cached steps run (null: the CPU); a backend needs kv_cache.
  NextTokenLogits(GPT2<float>& model, bool kv_cache, Ops* backend = nullptr);

  // The logits [Vp] (the first vocab real) of the token after ids, valid until the next call. Calls must
  // extend one text: each call's ids begin with the previous call's.
  const float* operator()(const std::vector<int32_t>& ids);

 private:
  GPT2<float>& model_;
  Ops& ops_;
  Arena cache_arena_;
  const float* decoder_params_ = nullptr;    // the weights as the decoder reads them (on its device)
  std::vector<float> host_logits_;           // a device's logits, downloaded
  std::unique_ptr<Decoder<float>> decoder_;  // null without the cache
  std::vector<int32_t> window_;              // the full forward's input
};

}  // namespace gpt
