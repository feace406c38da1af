// Where the tools (gpt_export, gpt_generate) get a whole model from, as one process without MPI: a checkpoint
// directory, reassembled from its rank shards.
#pragma once

#include <string>

#include "model/llmc_format.h"

namespace gpt {

// The fp32 master weights of the checkpoint in DIR (its `latest`, or DIR itself) in the model layout, and the
// model shape from its manifest. Throws UsageError naming the problem (a missing, altered or truncated file).
LlmcModel load_checkpoint_weights(const std::string& dir);

}  // namespace gpt
