// gpt_tokenize: GPT-2 tokenization on the command line. Text on stdin -> token ids on one line, or, with
// --decode, token ids on stdin -> the bytes they stand for. Exit code 2 on any error the user can fix.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace {

using gpt::data::DataError;

struct Options {
  bool decode = false;
  std::string vocab_file = gpt::data::default_vocab_file();
  std::string merge_file = gpt::data::default_merge_file();
};

// Returns false when --help was printed.
bool parse_flags(int argc, char** argv, Options& options) {
  gpt::FlagParser flags(
      "gpt_tokenize",
      "Reads text on stdin and prints its GPT-2 token ids on one line, separated by spaces. Any "
      "bytes are\naccepted (invalid UTF-8 too); \"<|endoftext|>\" in the text is ordinary text, "
      "never id 50256.\n$GPT_DATA_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/gpt_zeropp; "
      "scripts/setup fills it.");
  flags.add_switch("--decode", &options.decode,
                   "read token ids (separated by whitespace) on stdin and write their bytes to stdout");
  flags.add_string("--vocab-file", &options.vocab_file, "GPT-2 encoder.json (from $GPT_DATA_DIR)");
  flags.add_string("--merge-file", &options.merge_file, "GPT-2 vocab.bpe (from $GPT_DATA_DIR)");
  return flags.parse(argc, argv);
}

std::string read_stdin() {
  std::string input;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) input.append(buffer, got);
  if (std::ferror(stdin)) throw DataError("stdin: read error; check the input pipe or file");
  return input;
}

// Parses whitespace-separated decimal ids; a bad one is reported with its byte offset in the input.
std::vector<int32_t> parse_ids(const std::string& input, int vocab_size) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (true) {
    while (i < input.size() && std::isspace(static_cast<unsigned char>(input[i]))) ++i;
    if (i == input.size()) return ids;
    const size_t start = i;
    int64_t id = 0;
    while (i < input.size() && std::isdigit(static_cast<unsigned char>(input[i])) && id < vocab_size) {
      id = id * 10 + (input[i++] - '0');
    }
    const bool ends_cleanly = i == input.size() || std::isspace(static_cast<unsigned char>(input[i]));
    if (i == start || !ends_cleanly || id >= vocab_size) {
      size_t end = start;
      while (end < input.size() && !std::isspace(static_cast<unsigned char>(input[end]))) ++end;
      throw DataError("stdin: '" + input.substr(start, std::min<size_t>(end - start, 24)) +
                      "' at byte offset " + std::to_string(start) + " is not a token id in [0, " +
                      std::to_string(vocab_size) + "); give decimal ids separated by whitespace");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
}

int run(int argc, char** argv) {
  Options options;
  if (!parse_flags(argc, argv, options)) return 0;
  gpt::data::Tokenizer tokenizer(options.vocab_file, options.merge_file);
  const std::string input = read_stdin();
  std::string output;
  if (options.decode) {
    output = tokenizer.decode(parse_ids(input, tokenizer.vocab_size()));
  } else {
    const std::vector<int32_t> ids = tokenizer.encode(input);
    output.reserve(ids.size() * 6 + 1);
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k) output += ' ';
      output += std::to_string(ids[k]);
    }
    output += '\n';
  }
  if (std::fwrite(output.data(), 1, output.size(), stdout) != output.size() || std::fflush(stdout) != 0) {
    throw DataError("stdout: write error; check the output pipe or disk space");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("gpt_tokenize", [&] { return run(argc, argv); });
}
