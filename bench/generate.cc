// bench/generate: greedy generation through the key/value cache and through the full forward on every step
// (gpt_generate's two paths, model/generation.h), on a randomly initialized GPT-2 of the given shape: tokens
// per second of each, the ratio, and whether both chose the same tokens. Ends with one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "kernels/cpu/threads.h"
#include "model/generation.h"
#include "model/model.h"
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

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  gpt::cpu::set_num_threads(o.threads);
  gpt::GPTConfig config = o.config;
  config.seq_len = std::min(config.max_positions, o.prompt_tokens + o.new_tokens);  // gpt_generate's window
  gpt::GPT2<float> model(config, 1);
  model.init(1);
  std::vector<int32_t> prompt(o.prompt_tokens);
  for (int i = 0; i < o.prompt_tokens; ++i) prompt[i] = (i * 7919 + 13) % config.vocab;

  const Timed cached = generate(model, true, prompt, o.new_tokens);
  const Timed full = generate(model, false, prompt, o.new_tokens);
  const double cached_tps = o.new_tokens / cached.seconds, full_tps = o.new_tokens / full.seconds;
  const bool same = cached.tokens == full.tokens;
  std::printf(
      "shape: %d layers, hidden %d, %d heads, vocab %d; prompt %d tokens, %d new, window %d, %d threads\n",
      config.num_layers, config.hidden, config.heads, config.vocab, o.prompt_tokens, o.new_tokens,
      config.seq_len, o.threads);
  std::printf(
      "key/value cache: %.2f tokens/s; full forward every step: %.2f tokens/s; cached/full %.1fx; "
      "same tokens: %s\n",
      cached_tps, full_tps, cached_tps / full_tps, same ? "yes" : "no");
  std::printf(
      "{\"cached_tokens_per_s\": %.3f, \"full_tokens_per_s\": %.3f, \"speedup\": %.2f, \"same_tokens\": "
      "%s}\n",
      cached_tps, full_tps, cached_tps / full_tps, same ? "true" : "false");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/generate", [&] { return run(argc, argv); });
}
