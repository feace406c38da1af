// Hugging Face GPT-2 safetensors files (model/safetensors_format.h): our writer and reader round-trip every
// parameter bit for bit; a file from an independent writer (tests/llmc/hf_safetensors_writer.py, Python's
// standard library only) with the transformer. prefix, the tied lm_head, the old mask buffers and fp16 or
// bf16 tensors loads to the same weights (rounded for 16 bits) and the same loss bit for bit; and broken
// files are refused with one line naming the file and the problem.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <string>
#include <vector>

#include "kernels/common/random.h"
#include "model/llmc_format.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/safetensors_format.h"
#include "tensor/half.h"
#include "tests/llmc/test_support.h"

namespace gpt {
namespace {

using llmc_testing::read_bytes;
using llmc_testing::run_tool;
using llmc_testing::same_bits;
using llmc_testing::scratch;
using llmc_testing::tiny_config;
using llmc_testing::tool;
using llmc_testing::write_bytes;

// Distinct values everywhere but wte's padding rows, which stay zero.
std::vector<float> some_weights(const GPTConfig& c) {
  const ParamTable table = make_param_table(c);
  std::vector<float> params(size_t(table.total));
  for (int64_t i = 0; i < table.total; ++i) params[i] = float(random::uniform(17, uint64_t(i)) - 0.5);
  std::fill(params.begin() + int64_t(c.vocab) * c.hidden,
            params.begin() + int64_t(c.padded_vocab()) * c.hidden, 0.0f);
  return params;
}

// A directory of its own per file, since config.json lives beside the model.
std::string fresh_dir(const std::string& name) {
  const std::string dir = scratch(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Eight inputs and their targets (the same list shifted by one).
std::vector<int32_t> some_tokens(const GPTConfig& c) {
  std::vector<int32_t> tokens(9);
  for (int i = 0; i < 9; ++i) tokens[i] = (i * 37 + 5) % c.vocab;
  return tokens;
}

float loss_of(const GPTConfig& c, const std::vector<float>& params) {
  GPTConfig config = c;
  config.seq_len = 8;
  GPT2<float> model(config, 1);
  model.params = params;
  const std::vector<int32_t> tokens = some_tokens(c);
  return model.forward(tokens.data(), tokens.data() + 1);
}

std::string refusal(const std::string& path, int heads = 0) {
  try {
    read_model_file(path, heads);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "(read without complaint)";
}

TEST_CASE("safetensors: our writer and reader round-trip every parameter, with and without config.json") {
  const GPTConfig c = tiny_config();
  const std::vector<float> params = some_weights(c);
  const std::string dir = fresh_dir("roundtrip"), path = dir + "/model.safetensors";
  write_safetensors_model(path, c, params);
  CHECK(is_safetensors_file(path));
  const LlmcModel read = read_model_file(path);
  CHECK(read.config.num_layers == c.num_layers);
  CHECK(read.config.hidden == c.hidden);
  CHECK(read.config.heads == c.heads);
  CHECK(read.config.max_positions == c.max_positions);
  CHECK(read.config.vocab == c.vocab);
  CHECK(same_bits(read.params, params));

  std::filesystem::remove(dir + "/config.json");
  CHECK(same_bits(read_model_file(path, c.heads).params, params));
  const std::string error = refusal(path);
  CHECK(error.find(path) == 0);
  CHECK(error.find("--num-attention-heads") != std::string::npos);
}

TEST_CASE("safetensors: an independent writer's file gives the same weights and the same loss") {
  const GPTConfig c = tiny_config();
  const std::vector<float> params = some_weights(c);
  const std::string llmc = scratch("independent.bin");
  write_llmc_model(llmc, c, params);
  const float loss = loss_of(c, params);
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    CAPTURE(dtype);
    const std::string dir = fresh_dir(std::string("independent_") + dtype), path = dir + "/model.safetensors";
    const auto r = run_tool("python3", {tool("HF_WRITER"), llmc, path, "--dtype", dtype, "--prefix",
                                        "transformer.", "--lm-head", "--mask-buffers", "--config"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const LlmcModel read = read_model_file(path);
    std::vector<float> expected = params;
    if (std::string(dtype) != "f32") {
      for (float& v : expected) v = std::string(dtype) == "f16" ? round_to_f16(v) : round_to_bf16(v);
    }
    CHECK(same_bits(read.params, expected));
    if (std::string(dtype) == "f32") {
      const float reloaded = loss_of(read.config, read.params);
      CHECK(std::memcmp(&reloaded, &loss, sizeof(float)) == 0);
      MESSAGE("loss from the llm.c weights " << loss << ", from the independent safetensors file "
                                             << reloaded);
    }
  }
}

TEST_CASE("safetensors: a PyTorch forward in Hugging Face's convention gives our loss within 1e-5") {
  const GPTConfig c = tiny_config();
  const std::string dir = fresh_dir("reference"), path = dir + "/model.safetensors";
  write_safetensors_model(path, c, some_weights(c));
  const LlmcModel read = read_model_file(path);
  const float ours = loss_of(read.config, read.params);
  std::string tokens;
  for (int32_t t : some_tokens(c)) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  // Debian's python3, where python3-torch installs (scripts/setup).
  const auto r = run_tool("/usr/bin/python3", {tool("HF_REFERENCE"), path, tokens});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const double reference = std::stod(r.out);
  MESSAGE("loss: ours " << std::setprecision(9) << ours << ", PyTorch reference " << reference);
  CHECK(std::fabs(ours - reference) <= 1e-5 * std::fabs(reference));
}

// Replaces the first `from` in the header with `to` (same length, so the offsets stay right).
std::string edited(std::string bytes, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  return bytes.replace(at, from.size(), to);
}

TEST_CASE("safetensors: broken files are refused with one line naming the file and the problem") {
  const GPTConfig c = tiny_config();
  const std::string llmc = scratch("broken.bin");
  write_llmc_model(llmc, c, some_weights(c));
  const std::string dir = fresh_dir("broken"), good = dir + "/good.safetensors";
  const auto r =
      run_tool("python3", {tool("HF_WRITER"), llmc, good, "--lm-head", "--mask-buffers", "--config"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string bytes = read_bytes(good);
  struct Case {
    const char* what;
    std::string bytes;
    const char* says;
  };
  const Case cases[] = {
      {"truncated", bytes.substr(0, bytes.size() - 4), "truncated"},
      {"extra bytes", bytes + "abcd", "extra bytes"},
      {"a missing tensor", edited(bytes, "\"ln_f.bias\"", "\"ln_f.bixs\""), "has no tensor ln_f.bias"},
      {"an unexpected tensor", edited(bytes, "masked_bias", "masked_bixs"),
       "unexpected tensor h.1.attn.masked_bixs"},
      {"a shape that lies", edited(bytes, "\"shape\": [16],", "\"shape\": [61],"), "the header lies"},
      {"not JSON", edited(bytes, "\"dtype\": \"F32\"", "\"dtype\"; \"F32\""), "not JSON"},
      {"an untied lm_head", bytes.substr(0, bytes.size() - 4) + std::string("\0\0\x80\x3f", 4),
       "lm_head.weight differs"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    const std::string path = dir + "/model.safetensors";
    write_bytes(path, k.bytes);
    const std::string error = refusal(path);
    CHECK(error.find(path + ": ") == 0);
    CHECK_MESSAGE(error.find(k.says) != std::string::npos, error);
    CHECK(error.find('\n') == std::string::npos);
  }
}

}  // namespace
}  // namespace gpt
