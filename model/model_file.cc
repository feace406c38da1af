// Model files of either format; see model_file.h.
#include "model/model_file.h"

#include <utility>

#include "model/safetensors_format.h"

namespace gpt {

LlmcModel read_model_file(const std::string& path, int heads) {
  return is_safetensors_file(path) ? read_safetensors_model(path, heads) : read_llmc_model(path);
}

void load_model_file(const std::string& path, const GPTConfig& expected, std::vector<float>& params) {
  if (!is_safetensors_file(path)) {
    load_llmc_into_model_layout(path, expected, params);
    return;
  }
  LlmcModel model = read_safetensors_model(path, expected.heads);
  check_model_shape(path, model.config, expected);
  params = std::move(model.params);
}

}  // namespace gpt
