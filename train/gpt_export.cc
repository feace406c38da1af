// gpt_export: writes a single fp32 GPT-2 model file, in llm.c's format (model/llmc_format.h) or with
// --format safetensors in the Hugging Face layout (model/safetensors_format.h, config.json beside it), from a
// checkpoint (--load DIR), from another model file of either format (--model FILE: checks and rewrites it),
// or from the GPT-2 initialization of a shape and seed (--init-only), which is what gpt_train starts from
// with the same flags and --seed. Exit code 2 on any error the user can fix, with one line on stderr.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "model/config.h"
#include "model/init.h"
#include "model/llmc_format.h"
#include "model/model_file.h"
#include "model/params.h"
#include "model/safetensors_format.h"
#include "train/model_flags.h"
#include "train/model_source.h"

namespace gpt {
namespace {

struct ExportOptions {
  std::string output;
  std::string load_dir;         // --load
  std::string model_file;       // --model
  std::string format = "llmc";  // --format
  int model_heads = 0;          // --model: the head count of a model.safetensors without config.json
  bool init_only = false;
  GPTConfig model;  // --init-only's shape
  int64_t seed = 1234;
};

// Returns false when --help was printed.
bool parse_options(int argc, const char* const* argv, ExportOptions& o) {
  FlagParser flags(
      "gpt_export",
      "Writes an fp32 GPT-2 model file (llm.c's format, or --format safetensors) from a "
      "checkpoint, a model file or a fresh initialization: gpt_export --output FILE (--load DIR | "
      "--model FILE | --init-only [model flags] [--seed N]).");
  flags.group("Source (exactly one)");
  flags.add_string("--load", &o.load_dir, "a gpt_train checkpoint directory (its latest checkpoint)");
  flags.add_string(
      "--model", &o.model_file,
      "an llm.c model file or a Hugging Face model.safetensors: checked strictly and written again");
  flags.add_switch("--init-only", &o.init_only,
                   "the GPT-2 initialization of the model flags and --seed (as gpt_train starts)");
  flags.group("Model (with --init-only; defaults: GPT-2 124M)");
  add_model_flags(flags, &o.model, SeqLengthFlag::kNo);
  flags.add_int64("--seed", &o.seed, "initialization seed (gpt_train's --seed)", 0, INT64_MAX);
  flags.group("Output");
  flags.add_string("--output", &o.output, "the model file to write (via a temporary name and a rename)");
  flags.add_string("--format", &o.format,
                   "llmc (default): llm.c's fp32 file; safetensors: the Hugging Face GPT-2 layout, with "
                   "config.json beside it");
  if (!flags.parse(argc, argv)) return false;

  const int sources = int(!o.load_dir.empty()) + int(!o.model_file.empty()) + int(o.init_only);
  if (sources != 1) {
    throw UsageError(std::string(sources == 0 ? "no source given" : "more than one source given") +
                     ": pass exactly one of --load DIR, --model FILE and --init-only");
  }
  if (o.output.empty()) throw UsageError("--output FILE is required: the model file to write");
  if (o.format != "llmc" && o.format != "safetensors") {
    throw UsageError("--format " + o.format + " is not a model file format; use llmc or safetensors");
  }
  if (!o.model_file.empty() && flags.given("--num-attention-heads")) o.model_heads = o.model.heads;
  if (!o.init_only) {
    for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads",
                             "--max-position-embeddings", "--vocab-size", "--seed"}) {
      // A model.safetensors without config.json needs its head count from the flag.
      const bool heads_for_model = !o.model_file.empty() && std::string(flag) == "--num-attention-heads";
      if (flags.given(flag) && !heads_for_model) {
        throw UsageError(std::string(flag) +
                         " applies to --init-only; with --load or --model the shape and "
                         "weights come from the source");
      }
    }
  }
  o.model.seq_len = o.model.max_positions;  // the file has no training length
  if (std::string problem = o.model.validate(); !problem.empty()) throw UsageError(problem);
  return true;
}

LlmcModel initialize(const GPTConfig& config, uint64_t seed) {
  LlmcModel model{config, {}};
  const ParamTable table = make_param_table(config);
  model.params.resize(static_cast<size_t>(table.total));
  init_gpt2_params(config, table, seed, 0, table.total, model.params.data());
  return model;
}

int run(int argc, const char* const* argv) {
  ExportOptions o;
  if (!parse_options(argc, argv, o)) return 0;
  LlmcModel model;
  std::string source;
  if (!o.load_dir.empty()) {
    model = load_checkpoint_weights(o.load_dir);
    source = "checkpoint " + o.load_dir;
  } else if (!o.model_file.empty()) {
    model = read_model_file(o.model_file, o.model_heads);
    source = "model file " + o.model_file;
  } else {
    model = initialize(o.model, static_cast<uint64_t>(o.seed));
    source = "GPT-2 initialization, seed " + std::to_string(o.seed);
  }
  if (o.format == "safetensors") {
    write_safetensors_model(o.output, model.config, model.params);
  } else {
    write_llmc_model(o.output, model.config, model.params);
  }
  const GPTConfig& c = model.config;
  std::printf(
      "gpt_export: wrote %s: %lld parameters (L %d, C %d, NH %d, maxT %d, V %d, Vp %d), %.1f MB, from %s\n",
      o.output.c_str(), static_cast<long long>(model.params.size()), c.num_layers, c.hidden, c.heads,
      c.max_positions, c.vocab, c.padded_vocab(), double(std::filesystem::file_size(o.output)) / 1e6,
      source.c_str());
  return 0;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  return gpt::run_main("gpt_export", [&] {
    try {
      return gpt::run(argc, argv);
    } catch (const std::bad_alloc&) {
      throw gpt::UsageError("out of memory holding the model; export on a machine with more memory");
    }
  });
}
