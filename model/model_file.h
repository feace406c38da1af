// Model files of either format, told apart by their content: llm.c's GPT-2 file (llmc_format.h) or the
// Hugging Face hub's model.safetensors (safetensors_format.h). What gpt_train --init-from, gpt_export --model
// and gpt_generate --model read.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/llmc_format.h"

namespace gpt {

// The whole model. heads: the head count for a safetensors file without config.json beside it (0: none).
LlmcModel read_model_file(const std::string& path, int heads = 0);

// --init-from: the file's weights into params (the model layout) after checking that its shape is
// expected's; a mismatch names each differing value and the flag to change.
void load_model_file(const std::string& path, const GPTConfig& expected, std::vector<float>& params);

}  // namespace gpt
