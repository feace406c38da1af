// load_checkpoint_weights; see model_source.h.
#include "train/model_source.h"

#include "base/user_error.h"
#include "zero/checkpoint.h"

namespace gpt {

LlmcModel load_checkpoint_weights(const std::string& dir) {
  try {
    CheckpointWeights weights = read_checkpoint_weights(dir);
    return LlmcModel{weights.model, std::move(weights.params)};
  } catch (const CheckpointError& e) {
    throw UsageError(std::string("--load: ") + e.what());
  }
}

}  // namespace gpt
