// gpt_generate: samples text from a GPT-2 model file in llm.c's format (--model FILE) or, once wired, a
// gpt_train checkpoint (--load DIR). The prompt is tokenized with GPT-2's BPE; each new token is drawn from
// the first V logits (never the padding) with a counter-based RNG, so a seed gives the same text on any
// machine and thread count; --top-k 1 (or --temperature 0) is greedy. Prints the prompt and the continuation
// as it is generated, and with --print-ids the token ids. Exit code 2 on any error the user can fix.
//
// The context of each new token follows model/generation.h: the last min(length, W) tokens, W = min(maxT,
// prompt + new tokens), through a key/value cache while the text fits in W (the full forward over the window
// once it slides, and on every step with --no-kv-cache); tests/llmc compares it token for token with the
// model's own forward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/common/random.h"
#include "kernels/cpu/threads.h"
#include "model/generation.h"
#include "model/llmc_format.h"
#include "model/model.h"
#include "model/model_file.h"
#include "train/model_source.h"

namespace gpt {
namespace {

struct GenerateOptions {
  std::string model_file;  // --model
  std::string load_dir;    // --load
  std::string prompt;
  int max_new_tokens = 64;
  double temperature = 1.0;
  int top_k = 0;  // 0 = the whole vocabulary: the model's own distribution, as llm.c samples
  int64_t seed = 1234;
  bool print_ids = false;
  std::string vocab_file = data::default_vocab_file();
  std::string merge_file = data::default_merge_file();
  int threads = 0;
  bool no_kv_cache = false;
  std::string device = "cpu";  // where the key/value-cache steps run
  int heads = 0;               // for a model.safetensors without config.json
};

// Returns false when --help was printed.
bool parse_options(int argc, const char* const* argv, GenerateOptions& o) {
  FlagParser flags(
      "gpt_generate",
      "Samples text from a GPT-2 model: gpt_generate --model FILE --prompt TEXT [--max-new-tokens "
      "N] [--temperature T] [--top-k K] [--seed S]; --top-k 1 is greedy.");
  flags.group("Model (exactly one)");
  flags.add_string("--model", &o.model_file,
                   "an llm.c GPT-2 model file or a Hugging Face model.safetensors (gpt_export writes both)");
  flags.add_int("--num-attention-heads", &o.heads,
                "the head count of a model.safetensors without the hub's config.json beside it", 0, 1 << 16);
  flags.add_string("--load", &o.load_dir, "a gpt_train checkpoint directory (its latest checkpoint)");
  flags.group("Sampling");
  flags.add_string("--prompt", &o.prompt, "the text to continue (empty: start from <|endoftext|>)");
  flags.add_int("--max-new-tokens", &o.max_new_tokens, "tokens to generate", 0, 1 << 24);
  flags.add_double("--temperature", &o.temperature, "logits are divided by it; 0 = greedy", 0.0, 1e6);
  flags.add_int("--top-k", &o.top_k, "sample among the k most likely tokens; 0 = all, 1 = greedy", 0,
                1 << 24);
  flags.add_int64("--seed", &o.seed, "sampling seed: the same seed gives the same text", 0, INT64_MAX);
  flags.group("Tokenizer and output");
  flags.add_string("--vocab-file", &o.vocab_file, "GPT-2 encoder.json (from $GPT_DATA_DIR)");
  flags.add_string("--merge-file", &o.merge_file, "GPT-2 vocab.bpe (from $GPT_DATA_DIR)");
  flags.add_switch("--print-ids", &o.print_ids, "after the text, print the prompt's and the new tokens' ids");
  flags.add_int("--threads", &o.threads, "CPU threads (0 = all cores)", 0, 1024);
  flags.add_switch("--no-kv-cache", &o.no_kv_cache,
                   "run the full forward over the window for every new token (no key/value cache)");
  flags.add_string(
      "--device", &o.device,
      "cpu | cuda: where the key/value-cache steps run (the sliding window's forward stays on the "
      "CPU)");
  if (!flags.parse(argc, argv)) return false;
  check_device_name(o.device);
  if (o.device != "cpu" && o.no_kv_cache) {
    throw UsageError("--device " + o.device +
                     " runs the key/value-cache steps; drop --no-kv-cache (which runs on the CPU) or use "
                     "--device cpu");
  }
  if (o.model_file.empty() == o.load_dir.empty()) {
    throw UsageError(std::string(o.model_file.empty() ? "no model given" : "both --model and --load given") +
                     ": pass exactly one of --model FILE and --load DIR");
  }
  return true;
}

// The next token from logits[0 .. V): greedy when top-k is 1 or the temperature 0 (lowest id on ties);
// otherwise a draw from softmax(logits / temperature) over the k largest (all when k is 0 or >= V), by
// inverting the cumulative sum in id order at u = uniform(key, step).
int32_t pick_token(const float* logits, int V, const GenerateOptions& o, uint64_t key, uint64_t step,
                   std::vector<int32_t>& candidates) {
  if (o.top_k == 1 || o.temperature == 0.0) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);  // first of equal maxima
  }
  candidates.resize(V);
  for (int i = 0; i < V; ++i) candidates[i] = i;
  if (o.top_k > 0 && o.top_k < V) {
    const auto more_likely = [logits](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::nth_element(candidates.begin(), candidates.begin() + (o.top_k - 1), candidates.end(), more_likely);
    candidates.resize(o.top_k);
    std::sort(candidates.begin(), candidates.end());  // id order: the draw must not depend on nth_element
  }
  float max_logit = logits[candidates[0]];
  for (int32_t id : candidates) max_logit = std::max(max_logit, logits[id]);
  double total = 0;
  for (int32_t id : candidates) total += std::exp((double(logits[id]) - max_logit) / o.temperature);
  const double target = random::uniform(key, step) * total;
  double cumulative = 0;
  for (int32_t id : candidates) {
    cumulative += std::exp((double(logits[id]) - max_logit) / o.temperature);
    if (target < cumulative) return id;
  }
  return candidates.back();  // rounding left target at the very top
}

void write_out(const std::string& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0) {
    throw UsageError("stdout: write error; check the output pipe or disk space");
  }
}

std::string join_ids(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  std::string text;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) text += ' ';
    text += std::to_string(ids[i]);
  }
  return text;
}

// The prompt's ids, each inside the model's vocabulary V; an empty prompt starts from <|endoftext|>, as
// GPT-2's unconditional samples do.
std::vector<int32_t> prompt_ids(data::Tokenizer& tokenizer, const std::string& prompt, int V) {
  std::vector<int32_t> ids = tokenizer.encode(prompt);
  if (ids.empty()) {
    if (V <= data::kEndOfText) {
      throw UsageError("--prompt is empty and this model's vocabulary (" + std::to_string(V) +
                       " tokens) lacks <|endoftext|> to start from; give a --prompt");
    }
    ids.push_back(data::kEndOfText);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= V) {
      throw UsageError("--prompt token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                       ", outside this model's vocabulary of " + std::to_string(V) + " tokens");
    }
  }
  return ids;
}

// Appends max_new_tokens sampled tokens to ids, writing each one's bytes as it comes.
void sample(GPT2<float>& model, const data::Tokenizer& tokenizer, const GenerateOptions& o,
            std::vector<int32_t>& ids) {
  const uint64_t key = random::derive_key(static_cast<uint64_t>(o.seed), 0x67656e657261ULL);  // "genera"
  const std::unique_ptr<Ops> backend = make_backend(o.device, 0);
  NextTokenLogits next_logits(model, !o.no_kv_cache, backend.get());
  std::vector<int32_t> candidates;
  for (int step = 0; step < o.max_new_tokens; ++step) {
    const float* logits = next_logits(ids);
    const int32_t next =
        pick_token(logits, model.config().vocab, o, key, static_cast<uint64_t>(step), candidates);
    ids.push_back(next);
    write_out(tokenizer.token_bytes(next));
  }
}

int run(int argc, const char* const* argv) {
  GenerateOptions o;
  if (!parse_options(argc, argv, o)) return 0;
  if (o.threads > 0) cpu::set_num_threads(o.threads);
  data::Tokenizer tokenizer(o.vocab_file, o.merge_file);

  LlmcModel loaded =
      o.load_dir.empty() ? read_model_file(o.model_file, o.heads) : load_checkpoint_weights(o.load_dir);
  GPTConfig config = loaded.config;
  const std::string source = o.model_file.empty() ? o.load_dir : o.model_file;
  const int V = config.vocab;
  if (V > tokenizer.vocab_size()) {
    throw UsageError(source + ": the model's vocabulary of " + std::to_string(V) +
                     " tokens is larger than the GPT-2 tokenizer's " +
                     std::to_string(tokenizer.vocab_size()) + "; its extra tokens could not be printed");
  }
  std::vector<int32_t> ids = prompt_ids(tokenizer, o.prompt, V);
  const size_t prompt_length = ids.size();

  const int window = static_cast<int>(
      std::min<int64_t>(config.max_positions, int64_t(prompt_length) + std::max(o.max_new_tokens, 1)));
  config.seq_len = window;
  GPT2<float> model(config, 1);
  std::vector<float>().swap(model.grads);  // sampling never runs a backward
  model.params = std::move(loaded.params);
  std::fprintf(stderr,
               "gpt_generate: %s: L %d, C %d, NH %d, maxT %d, V %d; window %d tokens; %d new tokens, "
               "temperature %g, top-k %d, seed %lld\n",
               source.c_str(), config.num_layers, config.hidden, config.heads, config.max_positions, V,
               window, o.max_new_tokens, o.temperature, o.top_k, static_cast<long long>(o.seed));
  if (prompt_length > size_t(config.max_positions)) {
    std::fprintf(stderr, "gpt_generate: the prompt's %zu tokens exceed maxT %d; the model sees the last %d\n",
                 prompt_length, config.max_positions, config.max_positions);
  }

  write_out(o.prompt.empty() ? tokenizer.token_bytes(data::kEndOfText) : o.prompt);
  sample(model, tokenizer, o, ids);
  write_out("\n");
  if (o.print_ids) {
    write_out("prompt ids: " + join_ids(ids, 0, prompt_length) + "\n");
    write_out("generated ids: " + join_ids(ids, prompt_length, ids.size()) + "\n");
  }
  return 0;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  return gpt::run_main("gpt_generate", [&] {
    try {
      return gpt::run(argc, argv);
    } catch (const std::bad_alloc&) {
      throw gpt::UsageError("out of memory holding the model; use a machine with more memory");
    }
  });
}
