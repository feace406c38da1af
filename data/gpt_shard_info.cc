// gpt_shard_info: checks llm.c token shards the way the trainer reads them and prints one line per shard
// (path, tokens, documents, largest id); --decode writes their text instead. Exit code 2 on a bad shard,
// with the same one-line message gpt_train would give.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace {

using gpt::UsageError;

struct Options {
  int vocab_size = 50257;
  bool decode = false;
  std::string vocab_file = gpt::data::default_vocab_file(), merge_file = gpt::data::default_merge_file();
  std::vector<std::string> patterns;
};

// Returns false when --help was printed.
bool parse_flags(int argc, char** argv, Options& o) {
  gpt::FlagParser flags(
      "gpt_shard_info",
      "Validates token shards (llm.c format: magic, version, size, every id < vocab size) and "
      "prints for each\n\"PATH: T tokens, D documents, largest id I\". SHARD is a file or a "
      "quoted glob.");
  flags.add_int("--vocab-size", &o.vocab_size, "ids must be < N (GPT-2's is 50257)", 1, 65536);
  flags.add_switch("--decode", &o.decode,
                   "write the shards' text to stdout instead (<|endoftext|> marks document starts)");
  flags.add_string("--vocab-file", &o.vocab_file, "GPT-2 encoder.json for --decode");
  flags.add_string("--merge-file", &o.merge_file, "GPT-2 vocab.bpe for --decode");
  flags.add_positional("SHARD", &o.patterns);
  if (!flags.parse(argc, argv)) return false;
  if (o.patterns.empty()) throw UsageError("no shard given; see --help");
  return true;
}

// One line per shard, or (--decode) its text.
void report(const std::string& path, const std::vector<uint16_t>& tokens,
            std::vector<gpt::data::Tokenizer>& tokenizer) {
  if (!tokenizer.empty()) {
    const std::vector<int32_t> ids(tokens.begin(), tokens.end());
    const std::string text = tokenizer.front().decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  const auto documents = std::count(tokens.begin(), tokens.end(), gpt::data::kEndOfText);
  const int largest = tokens.empty() ? -1 : *std::max_element(tokens.begin(), tokens.end());
  std::printf("%s: %zu tokens, %td documents, largest id %d\n", path.c_str(), tokens.size(), documents,
              largest);
}

int run(int argc, char** argv) {
  Options o;
  if (!parse_flags(argc, argv, o)) return 0;
  std::vector<gpt::data::Tokenizer> tokenizer;  // loaded only for --decode
  if (o.decode) tokenizer.emplace_back(o.vocab_file, o.merge_file);
  for (const std::string& pattern : o.patterns) {
    for (const std::string& path : gpt::data::expand_data_path(pattern)) {
      report(path, gpt::data::read_shard(path, o.vocab_size), tokenizer);
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("gpt_shard_info", [&] { return run(argc, argv); });
}
