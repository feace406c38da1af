// gpt_shard_info: checks llm.c token shards the way the trainer reads them and prints one line per shard
// (path, tokens, documents, largest id); --decode writes their text instead. Exit code 2 on a bad shard,
// with the same one-line message gpt_train would give.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/tokenizer.h"

namespace {

constexpr const char* kUsage = R"(usage: gpt_shard_info [--vocab-size N] [--decode] SHARD...

Validates token shards (llm.c format: magic, version, size, every id < vocab size) and prints for each
"PATH: T tokens, D documents, largest id I". SHARD is a file or a quoted glob.

  --vocab-size N      ids must be < N (default 50257, GPT-2's)
  --decode            write the shards' text to stdout instead (<|endoftext|> marks document starts)
  --vocab-file PATH   GPT-2 encoder.json for --decode (default: $GPT_DATA_DIR/encoder.json)
  --merge-file PATH   GPT-2 vocab.bpe for --decode    (default: $GPT_DATA_DIR/vocab.bpe)
)";

using gpt::data::DataError;

int parse_vocab_size(const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1 || value > 65536) {
    throw DataError("gpt_shard_info: --vocab-size '" + text +
                    "' is not an integer in [1, 65536]; e.g. 50257");
  }
  return static_cast<int>(value);
}

int run(int argc, char** argv) {
  int vocab_size = 50257;
  bool decode = false;
  std::string vocab_file = gpt::data::default_vocab_file(), merge_file = gpt::data::default_merge_file();
  std::vector<std::string> patterns;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw DataError("gpt_shard_info: " + arg + " needs a value; see --help");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--vocab-size") {
      vocab_size = parse_vocab_size(value());
    } else if (arg == "--decode") {
      decode = true;
    } else if (arg == "--vocab-file") {
      vocab_file = value();
    } else if (arg == "--merge-file") {
      merge_file = value();
    } else if (arg.starts_with("--")) {
      throw DataError("gpt_shard_info: unknown flag '" + arg + "'; see --help");
    } else {
      patterns.push_back(arg);
    }
  }
  if (patterns.empty()) throw DataError("gpt_shard_info: no shard given; see --help");

  std::vector<gpt::data::Tokenizer> tokenizer;  // loaded only for --decode
  if (decode) tokenizer.emplace_back(vocab_file, merge_file);
  for (const std::string& pattern : patterns) {
    for (const std::string& path : gpt::data::expand_data_path(pattern)) {
      const std::vector<uint16_t> tokens = gpt::data::read_shard(path, vocab_size);
      if (decode) {
        const std::vector<int32_t> ids(tokens.begin(), tokens.end());
        const std::string text = tokenizer.front().decode(ids);
        std::fwrite(text.data(), 1, text.size(), stdout);
        continue;
      }
      const auto documents = std::count(tokens.begin(), tokens.end(), gpt::data::kEndOfText);
      const int largest = tokens.empty() ? -1 : *std::max_element(tokens.begin(), tokens.end());
      std::printf("%s: %zu tokens, %td documents, largest id %d\n", path.c_str(), tokens.size(), documents,
                  largest);
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const DataError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
