// GPT-2 model shape: layers, width, heads, context and vocabulary, with the padded vocabulary every
// shard and quantization block divides evenly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

// Every rule a configuration breaks, in the order a user should fix them: one line each, naming the setting
// and the fix. Each rule's message is written once, in the problems() of the object that owns the setting
// (GPTConfig here, ParallelLayout in model/params.h, ZeroConfig and OffloadConfig in zero/config.h); the
// trainer's options, the engine, the planner and the checkpoint manifest report the first one instead of
// restating the rule.
using Problems = std::vector<std::string>;
// The problem to report first (empty when there is none).
inline std::string first_problem(const Problems& found) {
  return found.empty() ? std::string() : found.front();
}

struct GPTConfig {
  int num_layers = 12;
  int hidden = 768;          // C
  int heads = 12;            // NH
  int max_positions = 1024;  // rows of wpe (--max-position-embeddings)
  int seq_len = 1024;        // T used for training (<= max_positions)
  int vocab = 50257;         // V, GPT-2's

  // Vp: V rounded up to a multiple of 128 (50257 -> 50304). Rows V..Vp-1 of wte are zero and stay zero.
  int padded_vocab() const { return (vocab + 127) / 128 * 128; }
  int head_size() const { return hidden / heads; }

  // Parameters without the position embedding (as nanoGPT counts N): Vp C + L (12 C^2 + 13 C) + 2 C.
  int64_t params_without_positions() const;
  // Training FLOPs per token as nanoGPT/PaLM count them: 6 N + 12 L C T (recomputation not counted).
  double model_flops_per_token() const;

  // Every rule the shape breaks, one sentence each naming the setting and the fix (empty when usable).
  Problems problems() const;
  // The first of problems(), or empty.
  std::string validate() const;
};

// Rows of logits the fused classifier (Ops::classifier_forward, a backend that fuses_classifier()) holds at a
// time: the head's chunk [min(rows, 1024), Vp] instead of the whole [B*T, Vp]. 1024 rows keep the logits
// GEMM large enough to run at the GEMMs' rate (1024 x 768 x 50304 at GPT-2 124M) while the chunk is 206 MB
// instead of 1.65 GB at B*T = 8192.
inline constexpr int64_t kClassifierChunkRows = 1024;
inline int64_t classifier_chunk_rows(int64_t rows) {
  return rows < kClassifierChunkRows ? rows : kClassifierChunkRows;
}

}  // namespace gpt
