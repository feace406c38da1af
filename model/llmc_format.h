// llm.c's GPT-2 model file (version 3, fp32): the interchange format of gpt_export, gpt_generate and
// gpt_train --init-from, so weights move between this project and llm.c (and GPT-2 124M converted by llm.c's
// train_gpt2.py loads here).
//
// Layout: a header of 256 little-endian int32 -- [0] magic 20240326, [1] version 3, [2] maxT, [3] V, [4] L,
// [5] NH, [6] C, [7] Vp, the rest zero -- then every parameter as fp32 in llm.c's order, parameter-major
// across layers: wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C],
// attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C],
// fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C]. Linear weights are [out, in] in both layouts, so
// converting to and from our unit-major layout (model/params.h) only moves whole tensors: the element count
// is the same and the conversion is a permutation of contiguous pieces.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "model/config.h"

namespace gpt {

// A model file that cannot be read or written, or does not match the expected model. The message is one line
// naming the file, the problem, the byte offset where it applies and what to do. Tools exit with code 2.
struct ModelFileError : UsageError {
  using UsageError::UsageError;
};

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersion = 3;  // fp32; llm.c's version 5 is bf16, which we do not read
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

// One contiguous tensor of the file: a whole parameter of one layer (or wte, wpe, lnfw, lnfb).
struct LlmcTensor {
  std::string llmc_name;     // "qkvw"
  std::string model_name;    // the parameter table's name: "h.3.attn.c_attn.weight"
  int64_t file_offset = 0;   // first element in the file's body (after the header)
  int64_t model_offset = 0;  // first element in the model layout
  int64_t numel = 0;
};

// The file's tensors in file order; they tile both layouts exactly.
std::vector<LlmcTensor> llmc_tensors(const GPTConfig& config);
// Element count of the body (equal to make_param_table(config).total).
int64_t llmc_param_count(const GPTConfig& config);
// Converters between the two layouts; both spans hold llmc_param_count(config) elements.
void model_to_llmc_order(const GPTConfig& config, std::span<const float> model, std::span<float> llmc);
void llmc_to_model_order(const GPTConfig& config, std::span<const float> llmc, std::span<float> model);

// A model's shape and weights in the model layout of model/params.h.
struct LlmcModel {
  GPTConfig config;  // seq_len = max_positions (the file does not store a training length)
  std::vector<float> params;
};

// Reads the header and checks it against the file's size. Returns the shape, seq_len = max_positions.
GPTConfig read_llmc_header(const std::string& path);
// Reads a whole file strictly: header, exact length, zero padding rows of wte, finite values.
LlmcModel read_llmc_model(const std::string& path);

// Throws ModelFileError when file's shape differs from expected's (the model flags'), naming each differing
// value and the flag that would match it.
void check_model_shape(const std::string& path, const GPTConfig& file, const GPTConfig& expected);

// --init-from: reads the file into `params` (resized to the model layout's size) after checking that its
// shape is `expected`'s; a mismatch names each differing value and the flag to change.
void load_llmc_into_model_layout(const std::string& path, const GPTConfig& expected,
                                 std::vector<float>& params);
// The same for elements [begin, end) of the model layout only, into out[0 .. end-begin): a rank can read its
// own shard of a large model without holding the whole of it. Checks (padding, finiteness) cover that range.
void load_llmc_model_range(const std::string& path, const GPTConfig& expected, int64_t begin, int64_t end,
                           float* out);

// Writes `params` (model layout) to a temporary name beside `path`, then renames it into place. Refuses
// weights it would refuse to read back (non-zero padding rows, NaN or infinity), naming the parameter.
void write_llmc_model(const std::string& path, const GPTConfig& config, std::span<const float> params);

}  // namespace gpt
