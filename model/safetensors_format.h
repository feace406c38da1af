// GPT-2 weights as the Hugging Face hub ships them: `model.safetensors` in the GPT-2 layout, with the
// `config.json` the hub puts beside it. gpt_export writes them; gpt_train --init-from, gpt_export --model and
// gpt_generate --model read them.
//
// The safetensors file: 8 bytes, the little-endian length N of a JSON header; N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets into the data after the header,
// which the tensors tile without holes or overlaps), plus an optional "__metadata__" of strings; then the
// data, row-major and little-endian.
//
// The GPT-2 layout as the hub's files really are:
//   - names with or without the "transformer." prefix: wte.weight [V, C] (the unpadded vocabulary),
//     wpe.weight [maxT, C], h.N.{ln_1,ln_2}.{weight,bias} [C], h.N.attn.c_attn.{weight [C, 3C], bias [3C]},
//     h.N.attn.c_proj.{weight [C, C], bias [C]}, h.N.mlp.c_fc.{weight [C, 4C], bias [4C]},
//     h.N.mlp.c_proj.{weight [4C, C], bias [C]}, ln_f.{weight,bias} [C];
//   - the four linear weights are Conv1D's, stored [in, out] (y = x W + b): the transpose of our [out, in];
//   - lm_head.weight, when present, must equal wte (GPT-2 ties them);
//   - older files carry the causal-mask buffers h.N.attn.bias and h.N.attn.masked_bias: ignored;
//   - tensors in F32, F16 or BF16 (widened exactly to fp32).
// The shape comes from the tensors; the head count cannot, so it comes from config.json ("n_head") beside the
// file when there is one, otherwise from the caller (the model flags).
#pragma once

#include <span>
#include <string>

#include "model/config.h"
#include "model/llmc_format.h"

namespace gpt {

// Whether the file at path begins like a safetensors file (a header length and then '{'), as opposed to an
// llm.c model file. False for a file that cannot be read.
bool is_safetensors_file(const std::string& path);

// The config.json path beside a model file: the same directory.
std::string config_json_beside(const std::string& model_path);

// Reads a GPT-2 safetensors file strictly into the model layout (wte padded with zero rows to Vp). heads: the
// head count to use when no config.json is beside the file (0: none known, an error then); when both are
// given they must agree. Every problem is a ModelFileError: one line naming the file, the tensor or byte
// offset, and the fix.
LlmcModel read_safetensors_model(const std::string& path, int heads);

// Writes params (model layout) as a GPT-2 safetensors file in fp32 with the hub's names (no prefix, Conv1D
// weights [in, out], the unpadded vocabulary, no lm_head), and config.json beside it; each via a temporary
// name and a rename.
void write_safetensors_model(const std::string& path, const GPTConfig& config, std::span<const float> params);

}  // namespace gpt
