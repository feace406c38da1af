// bench/generate: greedy generation on a randomly initialized GPT-2 of the given shape, three ways: through
// the key/value cache and through gpt_generate's --no-kv-cache forward (model/generation.h: the window padded
// to its full length, logits at every position), and the fair recomputation without a cache (the forward over
// the real prefix only, logits at its last position only). Tokens per second of each, the cache's speedup
// over the fair recomputation (and over the padded forward), and whether all three chose the same tokens.
// Ends with one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "model/generation.h"
#include "model/layers.h"
#include "model/loop.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "tensor/arena.h"
#include "train/model_flags.h"

namespace {

struct Options {
  gpt::GPTConfig config;  // GPT-2 124M by default
  int prompt_tokens = 8, new_tokens = 256, threads = 2;
};

bool parse(int argc, char** argv, Options& o) {
  gpt::FlagParser flags(
      "bench/generate",
      "Times greedy generation with and without the key/value cache (GPT-2 124M by default).");
  gpt::add_model_flags(flags, &o.config, gpt::SeqLengthFlag::kNo);
  gpt::add_short_model_aliases(flags);
  flags.add_int("--prompt-tokens", &o.prompt_tokens, "tokens of the (synthetic) prompt", 1, 1 << 20);
  flags.add_int("--new-tokens", &o.new_tokens, "tokens to generate", 1, 1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads", 1, 1024);
  if (!flags.parse(argc, argv)) return false;
  if (std::string problem = o.config.validate(); !problem.empty()) throw gpt::UsageError(problem);
  return true;
}

struct Timed {
  std::vector<int32_t> tokens;
  double seconds = 0;
};

// Greedy generation of `count` tokens after `prompt`, timed from the first call (prompt processing
// included, as a user waits for it).
Timed generate(gpt::GPT2<float>& model, bool kv_cache, const std::vector<int32_t>& prompt, int count) {
  gpt::NextTokenLogits next_logits(model, kv_cache);
  std::vector<int32_t> ids = prompt;
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < count; ++k) {
    const float* logits = next_logits(ids);
    ids.push_back(int32_t(std::max_element(logits, logits + model.config().vocab) - logits));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {std::vector<int32_t>(ids.begin() + prompt.size(), ids.end()), seconds};
}

// Slices of the model's flat parameters, for a LayerLoop.
class ParamSlices final : public gpt::WeightSource<float> {
 public:
  explicit ParamSlices(const gpt::GPT2<float>& model) : model_(model) {}
  void begin_pass(gpt::Pass, const std::vector<int>&) override {}
  gpt::WeightView acquire(int unit) override {
    return model_.params.data() + model_.table().units[unit].offset;
  }
  void release(int) override {}

 private:
  const gpt::GPT2<float>& model_;
};

// The fair recomputation without a cache: each step runs the blocks over the real prefix only (a layer loop
// sized for its length, no head) and the head (ln_f, logits) on the last position only. Only a second forward
// and the head are timed: a loop sized for each length, and the first forward that faults its fresh
// activations in, are this benchmark's way to run a shorter sequence, not work a recomputing generator would
// do every step. The prefix must fit the model's positions.
Timed generate_recomputed(gpt::GPT2<float>& model, const std::vector<int32_t>& prompt, int count) {
  const gpt::GPTConfig& whole = model.config();
  const int64_t C = whole.hidden;
  gpt::Ops& ops = gpt::cpu_ops();
  ParamSlices weights(model);
  const float* params = model.params.data();
  const float* lnf = params + model.table().units[model.table().final_norm_unit()].offset;
  const float* wte = params + model.table().units[gpt::ParamTable::kWte].offset;
  gpt::Arena head_arena("head");
  gpt::HeadActivations head;
  head.allocate(head_arena, gpt::DType::kF32, whole, 1, 1);
  std::vector<int32_t> ids = prompt;
  double seconds = 0;
  for (int k = 0; k < count; ++k) {
    gpt::GPTConfig config = whole;
    config.seq_len = int(ids.size());
    const gpt::PipelineChunk blocks{.first_layer = 0, .end_layer = whole.num_layers, .embedding = true};
    gpt::Arena arena("prefix");
    gpt::LayerLoop<float> loop(config, 1, gpt::Recompute{}, ops, arena, 1, gpt::TensorParallel{}, blocks);
    loop.forward(weights, ids.data(), nullptr, gpt::Dropout{}, false);
    const auto start = std::chrono::steady_clock::now();
    loop.forward(weights, ids.data(), nullptr, gpt::Dropout{}, false);
    const gpt::Tensor out = loop.chunk_output();
    const gpt::Tensor last{static_cast<float*>(out.data) + (int64_t(ids.size()) - 1) * C,
                           {1, 1, C},
                           gpt::DType::kF32,
                           out.device};
    gpt::head_forward(ops, whole, lnf, lnf + C, wte, last, gpt::Tensor{}, head);
    const float* logits = static_cast<const float*>(head.probs.data);
    ids.push_back(int32_t(std::max_element(logits, logits + whole.vocab) - logits));
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return {std::vector<int32_t>(ids.begin() + prompt.size(), ids.end()), seconds};
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  gpt::cpu::set_num_threads(o.threads);
  if (o.prompt_tokens + o.new_tokens > o.config.max_positions) {
    throw gpt::UsageError("--prompt-tokens + --new-tokens must fit the model's " +
                          std::to_string(o.config.max_positions) + " positions (no sliding window here)");
  }
  gpt::GPTConfig config = o.config;
  config.seq_len = std::min(config.max_positions, o.prompt_tokens + o.new_tokens);  // gpt_generate's window
  gpt::GPT2<float> model(config, 1);
  model.init(1);
  std::vector<int32_t> prompt(o.prompt_tokens);
  for (int i = 0; i < o.prompt_tokens; ++i) prompt[i] = (i * 7919 + 13) % config.vocab;

  const Timed cached = generate(model, true, prompt, o.new_tokens);
  const Timed recomputed = generate_recomputed(model, prompt, o.new_tokens);
  const Timed padded = generate(model, false, prompt, o.new_tokens);
  const double cached_tps = o.new_tokens / cached.seconds, full_tps = o.new_tokens / recomputed.seconds,
               padded_tps = o.new_tokens / padded.seconds;
  const bool same = cached.tokens == recomputed.tokens && cached.tokens == padded.tokens;
  std::printf(
      "shape: %d layers, hidden %d, %d heads, vocab %d; prompt %d tokens, %d new, window %d, %d threads\n",
      config.num_layers, config.hidden, config.heads, config.vocab, o.prompt_tokens, o.new_tokens,
      config.seq_len, o.threads);
  std::printf(
      "key/value cache: %.2f tokens/s; recomputed (real prefix, last logits) every step: %.2f tokens/s; "
      "padded window, all logits (gpt_generate --no-kv-cache): %.2f tokens/s; cached/recomputed %.1fx, "
      "cached/padded %.1fx; same tokens: %s\n",
      cached_tps, full_tps, padded_tps, cached_tps / full_tps, cached_tps / padded_tps, same ? "yes" : "no");
  std::printf(
      "{\"cached_tokens_per_s\": %.3f, \"full_tokens_per_s\": %.3f, \"padded_tokens_per_s\": %.3f, "
      "\"speedup\": %.2f, \"speedup_vs_padded\": %.2f, \"same_tokens\": %s}\n",
      cached_tps, full_tps, padded_tps, cached_tps / full_tps, cached_tps / padded_tps,
      same ? "true" : "false");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/generate", [&] { return run(argc, argv); });
}
