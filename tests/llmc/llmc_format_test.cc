// llm.c's model file: the layout conversion checked element by element against llm.c's order written out
// here independently, bit-exact round trips through memory and files, GPT-2 124M's header, and every refusal
// (header fields, sizes, truncation, padding, non-finite values, shape mismatch) with its file and offset.
#include "model/llmc_format.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/common/random.h"
#include "model/params.h"
#include "tests/llmc/test_support.h"

namespace {

using gpt::GPTConfig;
using gpt::ModelFileError;
using namespace gpt::llmc_testing;

// llm.c's file order as its writer lays it out: wte, wpe, each block tensor kind across all layers, ln_f.
// Each entry: the model table's name and the element count llm.c gives that tensor.
std::vector<std::pair<std::string, int64_t>> llmc_order(const GPTConfig& c) {
  const int64_t C = c.hidden;
  std::vector<std::pair<std::string, int64_t>> order = {{"wte", int64_t(c.padded_vocab()) * C},
                                                        {"wpe", int64_t(c.max_positions) * C}};
  const std::pair<const char*, int64_t> kinds[] = {{"ln_1.weight", C},
                                                   {"ln_1.bias", C},
                                                   {"attn.c_attn.weight", 3 * C * C},
                                                   {"attn.c_attn.bias", 3 * C},
                                                   {"attn.c_proj.weight", C * C},
                                                   {"attn.c_proj.bias", C},
                                                   {"ln_2.weight", C},
                                                   {"ln_2.bias", C},
                                                   {"mlp.c_fc.weight", 4 * C * C},
                                                   {"mlp.c_fc.bias", 4 * C},
                                                   {"mlp.c_proj.weight", 4 * C * C},
                                                   {"mlp.c_proj.bias", C}};
  for (const auto& [suffix, numel] : kinds) {
    for (int l = 0; l < c.num_layers; ++l) order.push_back({"h." + std::to_string(l) + "." + suffix, numel});
  }
  order.push_back({"ln_f.weight", C});
  order.push_back({"ln_f.bias", C});
  return order;
}

// Finite values of every magnitude (negative zero and subnormals too), zero padding rows.
std::vector<float> model_values(const GPTConfig& c, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(gpt::llmc_param_count(c)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(gpt::random::normal(seed, i));
  v[int64_t(c.padded_vocab()) * c.hidden] = 1e-40f;  // wpe[0][0]: a subnormal
  v[v.size() - 1] = -0.0f;
  v[v.size() - 2] = std::numeric_limits<float>::max();
  std::fill(v.begin() + int64_t(c.vocab) * c.hidden, v.begin() + int64_t(c.padded_vocab()) * c.hidden, 0.0f);
  return v;
}

std::string error_reading(const std::string& path) {
  try {
    gpt::read_llmc_model(path);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the file's tensors tile both layouts and match the parameter table") {
  const GPTConfig c = tiny_config();
  const gpt::ParamTable table = gpt::make_param_table(c);
  const std::vector<gpt::LlmcTensor> tensors = gpt::llmc_tensors(c);
  CHECK(gpt::llmc_param_count(c) == table.total);
  REQUIRE(tensors.size() == table.params.size());
  int64_t file_offset = 0;
  for (const gpt::LlmcTensor& t : tensors) {
    CHECK(t.file_offset == file_offset);
    file_offset += t.numel;
    const gpt::ParamInfo& p = table.find(t.model_name);
    CHECK(t.model_offset == p.offset);
    CHECK(t.numel == p.numel);
  }
  CHECK(file_offset == table.total);
}

TEST_CASE("conversion puts every element where llm.c's order says, and back") {
  const GPTConfig c = tiny_config();
  const gpt::ParamTable table = gpt::make_param_table(c);
  REQUIRE(table.total < (1 << 24));  // element indices are exact as floats
  std::vector<float> model(table.total), llmc(table.total), back(table.total);
  std::iota(model.begin(), model.end(), 0.0f);
  gpt::model_to_llmc_order(c, model, llmc);

  int64_t file_offset = 0, mismatches = 0;
  std::string first_mismatch;
  for (const auto& tensor : llmc_order(c)) {
    const std::string& name = tensor.first;
    const int64_t numel = tensor.second;
    const gpt::ParamInfo& p = table.find(name);
    CHECK_MESSAGE(p.numel == numel, name);
    for (int64_t j = 0; j < numel; ++j) {
      if (llmc[file_offset + j] != float(p.offset + j)) {
        if (mismatches++ == 0) first_mismatch = name + " element " + std::to_string(j);
      }
    }
    file_offset += numel;
  }
  CHECK(file_offset == table.total);
  CHECK_MESSAGE(mismatches == 0, "first misplaced: " << first_mismatch);

  gpt::llmc_to_model_order(c, llmc, back);
  CHECK(same_bits(back, model));
}

TEST_CASE("write then read is bit-exact, with llm.c's header and body") {
  const GPTConfig c = tiny_config();
  const std::vector<float> params = model_values(c, 17);
  const std::string dir = scratch("round_trip");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.bin";
  gpt::write_llmc_model(path, c, params);

  const gpt::LlmcModel read = gpt::read_llmc_model(path);
  CHECK(same_bits(read.params, params));
  CHECK(read.config.num_layers == c.num_layers);
  CHECK(read.config.hidden == c.hidden);
  CHECK(read.config.heads == c.heads);
  CHECK(read.config.max_positions == c.max_positions);
  CHECK(read.config.seq_len == c.max_positions);
  CHECK(read.config.vocab == c.vocab);

  const std::string bytes = read_bytes(path);
  REQUIRE(int64_t(bytes.size()) == 1024 + 4 * int64_t(params.size()));
  std::vector<int32_t> header(256);
  std::memcpy(header.data(), bytes.data(), 1024);
  const std::vector<int32_t> expected_head = {20240326, 3, 12, 300, 2, 2, 16, 384};
  CHECK(std::vector<int32_t>(header.begin(), header.begin() + 8) == expected_head);
  CHECK(std::all_of(header.begin() + 8, header.end(), [](int32_t v) { return v == 0; }));
  std::vector<float> body(params.size()), llmc(params.size());
  std::memcpy(body.data(), bytes.data() + 1024, 4 * body.size());
  gpt::model_to_llmc_order(c, params, llmc);
  CHECK(same_bits(body, llmc));

  std::vector<float> loaded;
  gpt::load_llmc_into_model_layout(path, c, loaded);
  CHECK(same_bits(loaded, params));
  // Ranges that start and end inside tensors, cross tensor and unit boundaries, and cover everything.
  const int64_t total = int64_t(params.size());
  for (const std::pair<int64_t, int64_t>& range : std::vector<std::pair<int64_t, int64_t>>{
           {0, total}, {5, 6200}, {6100, 6300}, {7000, total - 3}, {total - 1, total}, {100, 100}}) {
    const int64_t begin = range.first, end = range.second;
    std::vector<float> part(end - begin);
    gpt::load_llmc_model_range(path, c, begin, end, part.data());
    CHECK_MESSAGE(same_bits(part, std::vector<float>(params.begin() + begin, params.begin() + end)),
                  "range [" << begin << ", " << end << ")");
  }

  // Writing again replaces the file; no temporary is left beside it.
  gpt::write_llmc_model(path, c, model_values(c, 18));
  CHECK(same_bits(gpt::read_llmc_model(path).params, model_values(c, 18)));
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 1);
}

TEST_CASE("GPT-2 124M as llm.c's train_gpt2.py writes it: header, size, a range") {
  const std::string path = scratch("gpt2_124M.bin");
  std::string header(1024, '\0');
  const int32_t fields[] = {20240326, 3, 1024, 50257, 12, 12, 768, 50304};
  std::memcpy(header.data(), fields, sizeof fields);
  write_bytes(path, header);
  const int64_t count = 124475904;  // llm.c's num_parameters for GPT-2 124M with the padded vocabulary
  std::filesystem::resize_file(path, 1024 + 4 * count);  // sparse: zeros, no disk

  const GPTConfig c = gpt::read_llmc_header(path);
  CHECK(c.max_positions == 1024);
  CHECK(c.vocab == 50257);
  CHECK(c.padded_vocab() == 50304);
  CHECK(c.num_layers == 12);
  CHECK(c.heads == 12);
  CHECK(c.hidden == 768);
  CHECK(gpt::llmc_param_count(c) == count);
  GPTConfig flags;  // gpt_train's defaults are GPT-2 124M's shape
  std::vector<float> ln_f(2 * 768, 1.0f);
  gpt::load_llmc_model_range(path, flags, count - 2 * 768, count, ln_f.data());
  CHECK(std::all_of(ln_f.begin(), ln_f.end(), [](float v) { return v == 0.0f; }));
  std::filesystem::remove(path);
}

TEST_CASE("a corrupt or foreign file is refused with its name, the problem and the byte offset") {
  const GPTConfig c = tiny_config();
  const std::vector<float> params = model_values(c, 3);
  const std::string good_path = scratch("good.bin");
  gpt::write_llmc_model(good_path, c, params);
  const std::string good = read_bytes(good_path);
  const int64_t size = int64_t(good.size());
  const std::vector<gpt::LlmcTensor> tensors = gpt::llmc_tensors(c);
  const auto body_byte = [&](const std::string& model_name, int64_t element) {
    for (const gpt::LlmcTensor& t : tensors) {
      if (t.model_name == model_name) return 1024 + 4 * (t.file_offset + element);
    }
    FAIL("no tensor " << model_name);
    return int64_t(0);
  };
  const int64_t nan_at = body_byte("h.1.attn.c_attn.weight", 7);
  const int64_t inf_at = body_byte("ln_f.bias", c.hidden - 1);
  const int64_t pad_at = body_byte("wte", int64_t(c.vocab) * c.hidden + 5);

  struct Case {
    const char* name;
    std::function<void(std::string&)> corrupt;
    std::vector<std::string> fragments;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"empty", [](std::string& b) { b.clear(); }, {"file is 0 bytes, shorter than the 1024-byte header"}},
      {"short header", [](std::string& b) { b.resize(100); }, {"ends at byte offset 100"}},
      {"magic",
       [](std::string& b) { poke(b, 0, int32_t(20240520)); },
       {"wrong magic 20240520 at byte offset 0 (expected 20240326)"}},
      {"bf16 version",
       [](std::string& b) { poke(b, 4, int32_t(5)); },
       {"unsupported version 5 at byte offset 4", "bf16"}},
      {"old version",
       [](std::string& b) { poke(b, 4, int32_t(1)); },
       {"unsupported version 1 at byte offset 4"}},
      {"zero maxT",
       [](std::string& b) { poke(b, 8, int32_t(0)); },
       {"maxT (positions) is 0 at byte offset 8"}},
      {"negative layers",
       [](std::string& b) { poke(b, 16, int32_t(-3)); },
       {"L (layers) is -3 at byte offset 16"}},
      {"huge width",
       [](std::string& b) { poke(b, 24, int32_t(1 << 30)); },
       {"C (width) is 1073741824 at byte offset 24"}},
      {"heads",
       [](std::string& b) { poke(b, 20, int32_t(3)); },
       {"C 16 (byte offset 24) is not divisible by NH 3"}},
      {"unpadded Vp",
       [](std::string& b) { poke(b, 28, int32_t(300)); },
       {"Vp 300 at byte offset 28 is not V 300 rounded up to a multiple of 128 (384)"}},
      {"truncated",
       [](std::string& b) { b.resize(b.size() - 4); },
       {"truncated", "so " + std::to_string(size) + " bytes",
        "ends at byte offset " + std::to_string(size - 4)}},
      {"more layers than data", [](std::string& b) { poke(b, 16, int32_t(3)); }, {"truncated", "L 3"}},
      {"trailing bytes",
       [](std::string& b) { b += std::string(8, 'x'); },
       {"8 unexpected bytes after the last parameter, from byte offset " + std::to_string(size)}},
      {"padding",
       [&](std::string& b) { poke(b, pad_at, 0.5f); },
       {"padding row 300 of wte", "at byte offset " + std::to_string(pad_at)}},
      {"nan",
       [&](std::string& b) { poke(b, nan_at, nan); },
       {"non-finite value nan in qkvw (h.1.attn.c_attn.weight) element 7 at byte offset " +
        std::to_string(nan_at)}},
      {"infinity",
       [&](std::string& b) { poke(b, inf_at, -inf); },
       {"in lnfb (ln_f.bias) element 15 at byte offset " + std::to_string(inf_at)}},
  };
  for (const Case& k : cases) {
    std::string bytes = good;
    k.corrupt(bytes);
    const std::string path = scratch(std::string("corrupt_") + std::to_string(&k - cases.data()) + ".bin");
    write_bytes(path, bytes);
    const std::string message = error_reading(path);
    CHECK_MESSAGE(message.rfind(path + ": ", 0) == 0, k.name << ": " << message);
    for (const std::string& fragment : k.fragments) {
      CHECK_MESSAGE(message.find(fragment) != std::string::npos,
                    k.name << ": '" << fragment << "' not in: " << message);
    }
    CHECK_MESSAGE(message.find('\n') == std::string::npos, k.name);
  }
  CHECK(error_reading(scratch("does_not_exist.bin")).find("cannot open model file") != std::string::npos);
  CHECK(error_reading(scratch("")).find("is not a regular file") != std::string::npos);
}

TEST_CASE("a shape mismatch with the model flags names both values and the flags to change") {
  const GPTConfig c = tiny_config();
  const std::string path = scratch("mismatch.bin");
  gpt::write_llmc_model(path, c, model_values(c, 4));
  GPTConfig flags = c;
  flags.num_layers = 4;
  flags.hidden = 32;
  flags.vocab = 50257;
  std::vector<float> params;
  try {
    gpt::load_llmc_into_model_layout(path, flags, params);
    FAIL("a mismatched shape was accepted");
  } catch (const ModelFileError& e) {
    const std::string m = e.what();
    CHECK(m.find(path + ": the model file does not match the model flags") == 0);
    CHECK(m.find("layers 2 in the file but --num-layers 4") != std::string::npos);
    CHECK(m.find("hidden size 16 in the file but --hidden-size 32") != std::string::npos);
    CHECK(m.find("vocabulary 300 in the file but --vocab-size 50257") != std::string::npos);
    CHECK(m.find("set --num-layers 2 --hidden-size 16 --vocab-size 300") != std::string::npos);
    CHECK(m.find("--num-attention-heads") == std::string::npos);
  }
  flags = c;
  flags.max_positions = 1024;
  flags.seq_len = 1024;
  CHECK_THROWS_WITH_AS(gpt::load_llmc_into_model_layout(path, flags, params),
                       doctest::Contains("positions 12 in the file but --max-position-embeddings 1024"),
                       ModelFileError);
  flags = c;
  flags.seq_len = 8;  // the training length is not part of the file
  gpt::load_llmc_into_model_layout(path, flags, params);
  CHECK(same_bits(params, model_values(c, 4)));
}

TEST_CASE("the writer refuses what the reader would refuse, and leaves no file") {
  const GPTConfig c = tiny_config();
  const std::string dir = scratch("refused");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.bin";
  std::vector<float> params = model_values(c, 5);
  params[int64_t(c.vocab) * c.hidden] = 1.0f;  // padding row V
  CHECK_THROWS_WITH_AS(gpt::write_llmc_model(path, c, params),
                       doctest::Contains("refusing to write the model: padding row 300 of wte"),
                       ModelFileError);
  params = model_values(c, 5);
  params[params.size() - 5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(gpt::write_llmc_model(path, c, params),
                       doctest::Contains("non-finite value nan in lnfb (ln_f.bias)"), ModelFileError);
  params.pop_back();
  CHECK_THROWS_AS(gpt::write_llmc_model(path, c, params), std::invalid_argument);
  CHECK(std::filesystem::is_empty(dir));
  CHECK_THROWS_WITH_AS(gpt::write_llmc_model(dir + "/no/such/dir/model.bin", c, model_values(c, 5)),
                       doctest::Contains("cannot create model file"), ModelFileError);
}
