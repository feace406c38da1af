// The model-shape flags every binary that builds a GPT-2 takes (gpt_train, gpt_export, the benchmarks), with
// Megatron's names, one range and one help text each. Here rather than in base/ (which depends on nothing)
// or model/ (which knows no command lines): train/ is the lowest room that sees both.
#pragma once

#include "base/flags.h"
#include "model/config.h"

namespace gpt {

enum class SeqLengthFlag { kYes, kNo };  // kNo: a model file has no training length (gpt_export)

// --num-layers --hidden-size --num-attention-heads [--seq-length] --max-position-embeddings --vocab-size,
// writing into *config (its values are the defaults shown by --help).
void add_model_flags(FlagParser& flags, GPTConfig* config, SeqLengthFlag seq_length = SeqLengthFlag::kYes);

// The benchmarks' short spellings, which README's commands use: --layers --hidden --heads --seq.
void add_short_model_aliases(FlagParser& flags);

}  // namespace gpt
