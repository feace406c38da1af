// The model-shape flags every binary that builds a GPT-2 takes (gpt_train, gpt_export, the benchmarks), with
// Megatron's names, one range and one help text each. Here rather than in base/ (which depends on nothing)
// or model/ (which knows no command lines): train/ is the lowest room that sees both.
#pragma once

#include <string>

#include "base/flags.h"
#include "model/config.h"

namespace gpt {

enum class SeqLengthFlag { kYes, kNo };  // kNo: a model file has no training length (gpt_export)

// --num-layers --hidden-size --num-attention-heads [--seq-length] --max-position-embeddings --vocab-size,
// writing into *config (its values are the defaults shown by --help).
void add_model_flags(FlagParser& flags, GPTConfig* config, SeqLengthFlag seq_length = SeqLengthFlag::kYes);

// The short spellings of the shape flags that docs/benchmarks.md's commands use: --layers, --hidden, --heads.
void add_short_model_aliases(FlagParser& flags);

// The benchmarks' shape flags: the model flags with the short spellings docs/benchmarks.md's commands use
// (--layers
// --hidden --heads --seq), and --micro-batch-size (alias --batch) into *micro_batch.
void add_bench_shape_flags(FlagParser& flags, GPTConfig* config, int* micro_batch,
                           const std::string& batch_help);
// After parsing them: the position table grows to any --seq unless --max-position-embeddings was given, then
// the shape is checked (UsageError naming the problem and the fix).
void finish_bench_shape(const FlagParser& flags, GPTConfig* config);

}  // namespace gpt
