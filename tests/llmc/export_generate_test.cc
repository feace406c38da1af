// gpt_export and gpt_generate end to end: --init-only writes the initialization the trainer starts from; an
// exported model, loaded again, reproduces its loss on a fixed batch; gpt_generate --top-k 1 reproduces,
// token for token, the greedy continuation computed here with GPT2::forward on exactly each context (so the
// tool's padded window is checked too); sampling repeats for a seed and stays inside the top k.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "kernels/cpu/adamw.h"
#include "model/llmc_format.h"
#include "model/model.h"
#include "tests/llmc/test_support.h"
#include "zero/optimizer.h"

namespace {

using gpt::GPTConfig;
using namespace gpt::llmc_testing;

std::vector<std::string> shape_flags(const GPTConfig& c) {
  return {"--num-layers",
          std::to_string(c.num_layers),
          "--hidden-size",
          std::to_string(c.hidden),
          "--num-attention-heads",
          std::to_string(c.heads),
          "--max-position-embeddings",
          std::to_string(c.max_positions),
          "--vocab-size",
          std::to_string(c.vocab)};
}

// Runs gpt_export --init-only for a shape and seed into `path`.
void export_initialization(const GPTConfig& c, int seed, const std::string& path) {
  std::vector<std::string> args = shape_flags(c);
  args.insert(args.end(), {"--init-only", "--seed", std::to_string(seed), "--output", path});
  const Outcome r = run_tool(tool("GPT_EXPORT"), args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("gpt_export: wrote " + path) == 0);
}

// A few AdamW steps on one fixed sequence, so biases and LayerNorms leave their initial values and the
// greedy continuation follows the sequence instead of repeating one token.
void train_briefly(gpt::GPT2<float>& model, const std::vector<int32_t>& tokens, int steps) {
  const int T = model.config().seq_len;
  REQUIRE(int(tokens.size()) >= T + 1);
  std::vector<float> m(model.params.size(), 0.0f), v(model.params.size(), 0.0f);
  gpt::cpu::AdamWHyper hyper;
  hyper.lr = 1e-2;
  hyper.weight_decay = 0.0;
  for (int step = 1; step <= steps; ++step) {
    model.zero_grad();
    model.forward(tokens.data(), tokens.data() + 1);
    model.backward(1.0f);
    gpt::adamw_step_range(model.table(), 0, model.table().total, model.params.data(), model.grads.data(),
                          m.data(), v.data(), hyper, step, 1.0f);
  }
}

// The first V logits of the last position, from a model built for exactly this context (its last maxT
// tokens): the model's own forward pass, with no padding.
std::vector<float> next_logits(const gpt::LlmcModel& file, const std::vector<int32_t>& ids) {
  GPTConfig c = file.config;
  const size_t n = std::min(ids.size(), size_t(c.max_positions));
  c.seq_len = int(n);
  gpt::GPT2<float> model(c, 1);
  model.params = file.params;
  model.forward(ids.data() + (ids.size() - n), nullptr);
  const float* last = model.logits() + int64_t(n - 1) * c.padded_vocab();
  return std::vector<float>(last, last + c.vocab);
}

std::vector<int32_t> greedy_continuation(const gpt::LlmcModel& file, std::vector<int32_t> ids, int count) {
  std::vector<int32_t> out;
  for (int k = 0; k < count; ++k) {
    const std::vector<float> logits = next_logits(file, ids);
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ids.push_back(best);
    out.push_back(best);
  }
  return out;
}

std::vector<int32_t> ids_after(const std::string& text, const std::string& label) {
  const size_t at = text.rfind("\n" + label);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << label << "' line in: " << text);
  std::istringstream line(
      text.substr(at + 1 + label.size(), text.find('\n', at + 1) - at - 1 - label.size()));
  std::vector<int32_t> ids;
  for (int32_t id; line >> id;) ids.push_back(id);
  return ids;
}

struct Generated {
  std::vector<int32_t> prompt, continuation;
  std::string stdout_text;
};

Generated generate(const std::string& model_path, const std::string& prompt, int new_tokens,
                   std::vector<std::string> extra) {
  std::vector<std::string> args = {"--model",
                                   model_path,
                                   "--prompt",
                                   prompt,
                                   "--max-new-tokens",
                                   std::to_string(new_tokens),
                                   "--print-ids",
                                   "--vocab-file",
                                   data_file("encoder.json"),
                                   "--merge-file",
                                   data_file("vocab.bpe")};
  args.insert(args.end(), extra.begin(), extra.end());
  const Outcome r = run_tool(tool("GPT_GENERATE"), args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return {ids_after(r.out, "prompt ids: "), ids_after(r.out, "generated ids: "), r.out};
}

GPTConfig generation_config() {
  GPTConfig c;  // the GPT-2 vocabulary, for the tokenizer; a short context, so generation slides past it
  c.num_layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.max_positions = 16;
  c.seq_len = 16;
  return c;
}

const char* const kPrompt = "The quick brown fox jumps";

}  // namespace

TEST_CASE("gpt_export --init-only writes the GPT-2 initialization of the shape and seed") {
  const GPTConfig c = tiny_config();
  const std::string path = scratch("init.bin");
  export_initialization(c, 99, path);
  gpt::GPT2<float> model(c, 1);
  model.init(99);  // what gpt_train's engine holds at step 0 with --seed 99
  const gpt::LlmcModel file = gpt::read_llmc_model(path);
  CHECK(same_bits(file.params, model.params));
  CHECK(file.config.num_layers == c.num_layers);
  CHECK(file.config.hidden == c.hidden);
  CHECK(file.config.vocab == c.vocab);
}

TEST_CASE("an exported model, loaded again, reproduces its loss on a fixed batch") {
  GPTConfig c = tiny_config();
  c.seq_len = 8;
  const int B = 2;
  std::vector<int32_t> tokens(B * c.seq_len + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 11) % c.vocab);
  gpt::GPT2<float> trained(c, B);
  trained.init(5);
  train_briefly(trained, tokens, 3);
  const float loss = trained.forward(tokens.data(), tokens.data() + 1);

  // In process, and through the tool (gpt_export --model checks the file and writes it again).
  const std::string written = scratch("trained.bin"), exported = scratch("exported.bin");
  gpt::write_llmc_model(written, c, trained.params);
  const Outcome r = run_tool(tool("GPT_EXPORT"), {"--model", written, "--output", exported});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(read_bytes(exported) == read_bytes(written));

  gpt::GPT2<float> loaded(c, B);  // what --init-from does: flags give the shape, the file the weights
  gpt::load_llmc_into_model_layout(exported, c, loaded.params);
  CHECK(same_bits(loaded.params, trained.params));
  const float reloaded_loss = loaded.forward(tokens.data(), tokens.data() + 1);
  CHECK(std::fabs(reloaded_loss - loss) <= 1e-6f);
  MESSAGE("loss " << loss << ", reloaded " << reloaded_loss);
}

TEST_CASE("gpt_generate --top-k 1 reproduces the model's own greedy continuation, token for token") {
  const GPTConfig c = generation_config();
  gpt::data::Tokenizer tokenizer(data_file("encoder.json"), data_file("vocab.bpe"));
  const std::vector<int32_t> prompt = tokenizer.encode(kPrompt);
  const int new_tokens = 24;  // prompt + new > maxT 16: the window slides

  // An initialization straight from gpt_export, and a briefly trained model exported from memory.
  const std::string init_path = scratch("generate_init.bin"), trained_path = scratch("generate_trained.bin");
  export_initialization(c, 7, init_path);
  {
    const std::vector<int32_t> text = tokenizer.encode(
        " over the lazy dog, and the dog sleeps on while the fox runs far away into the quiet woods.");
    gpt::GPT2<float> model(c, 1);
    model.init(8);
    train_briefly(model, text, 40);
    gpt::write_llmc_model(trained_path, c, model.params);
  }
  for (const std::string& path : {init_path, trained_path}) {
    CAPTURE(path);
    const gpt::LlmcModel file = gpt::read_llmc_model(path);
    const std::vector<int32_t> expected = greedy_continuation(file, prompt, new_tokens);
    const Generated got = generate(path, kPrompt, new_tokens, {"--top-k", "1"});
    CHECK(got.prompt == prompt);
    CHECK(got.continuation == expected);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), expected.begin(), expected.end());
    CHECK(got.stdout_text.rfind(tokenizer.decode(all) + "\nprompt ids: ", 0) == 0);
    // Temperature 0 is greedy too, whatever the seed.
    CHECK(generate(path, kPrompt, new_tokens, {"--temperature", "0", "--seed", "5"}).continuation ==
          expected);
    std::ostringstream shown;
    for (int32_t id : expected) shown << id << ' ';
    MESSAGE("greedy continuation: " << shown.str());
  }
}

TEST_CASE("gpt_generate gives the same greedy text with and without the key/value cache") {
  gpt::data::Tokenizer tokenizer(data_file("encoder.json"), data_file("vocab.bpe"));
  const std::vector<int32_t> text = tokenizer.encode(
      " over the lazy dog, and the dog sleeps on while the fox runs far away into the quiet woods.");
  // maxT 64: the whole text stays in the cache; maxT 16: the window slides after 11 new tokens.
  for (int max_positions : {64, 16}) {
    CAPTURE(max_positions);
    GPTConfig c = generation_config();  // trained on 16-token windows
    c.max_positions = max_positions;
    const std::string path = scratch("cache_" + std::to_string(max_positions) + ".bin");
    {
      gpt::GPT2<float> model(c, 1);
      model.init(21);
      train_briefly(model, text, 40);
      gpt::write_llmc_model(path, c, model.params);
    }
    const int new_tokens = 40;
    const Generated cached = generate(path, kPrompt, new_tokens, {"--top-k", "1"});
    const Generated full = generate(path, kPrompt, new_tokens, {"--top-k", "1", "--no-kv-cache"});
    CHECK(cached.continuation == full.continuation);
    CHECK(cached.stdout_text == full.stdout_text);
    CHECK(cached.continuation ==
          greedy_continuation(gpt::read_llmc_model(path), tokenizer.encode(kPrompt), new_tokens));
  }
}

TEST_CASE("gpt_generate samples repeat for a seed, differ across seeds and stay inside the top k") {
  const GPTConfig c = generation_config();
  gpt::data::Tokenizer tokenizer(data_file("encoder.json"), data_file("vocab.bpe"));
  const std::string path = scratch("sample.bin");
  export_initialization(c, 3, path);
  const gpt::LlmcModel file = gpt::read_llmc_model(path);
  const int new_tokens = 20, k = 5;
  const Generated first = generate(path, kPrompt, new_tokens, {"--top-k", std::to_string(k), "--seed", "11"});
  const Generated again = generate(path, kPrompt, new_tokens, {"--top-k", std::to_string(k), "--seed", "11"});
  const Generated other = generate(path, kPrompt, new_tokens, {"--top-k", std::to_string(k), "--seed", "12"});
  CHECK(first.stdout_text == again.stdout_text);
  CHECK(first.continuation != other.continuation);
  REQUIRE(first.continuation.size() == size_t(new_tokens));
  std::vector<int32_t> ids = first.prompt;
  for (int32_t token : first.continuation) {
    const std::vector<float> logits = next_logits(file, ids);
    const int64_t above =
        std::count_if(logits.begin(), logits.end(), [&](float v) { return v > logits[token]; });
    CHECK_MESSAGE(above < k, "token " << token << " has " << above << " more likely tokens");
    ids.push_back(token);
  }
  // With every token allowed (the default) the draws leave the top 5 at least once in 20 for this flat model.
  const Generated full = generate(path, kPrompt, new_tokens, {"--seed", "11"});
  ids = full.prompt;
  int64_t outside = 0;
  for (int32_t token : full.continuation) {
    const std::vector<float> logits = next_logits(file, ids);
    outside += std::count_if(logits.begin(), logits.end(), [&](float v) { return v > logits[token]; }) >= k;
    ids.push_back(token);
  }
  CHECK(outside > 0);
}
