// Tokenizer throughput: GPT-2 BPE over the SOTU corpus (or the text files given), one thread, starting from
// an empty piece cache each pass. Prints the median of 3 passes as one JSON line:
//   {"mb_per_s": .., "tokens": ..}
// with details on stderr. Loading the vocabulary is not timed. A benchmark: it never fails on time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace {

using gpt::data::DataError;

std::vector<std::string> read_corpus(std::vector<std::string> paths) {
  if (paths.empty()) {
    const std::string dir = gpt::data::default_data_dir() + "/sotu";
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      if (entry.path().extension() == ".txt") paths.push_back(entry.path().string());
    }
    if (paths.empty()) throw DataError(dir + ": no SOTU *.txt files; run scripts/setup to fetch them");
    std::sort(paths.begin(), paths.end());
  }
  std::vector<std::string> texts;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError(path + ": cannot read text file; check the path");
    std::ostringstream content;
    content << in.rdbuf();
    texts.push_back(content.str());
  }
  return texts;
}

int run(int argc, char** argv) {
  std::vector<std::string> paths;
  gpt::FlagParser flags("bench/tokenize",
                        "GPT-2 BPE throughput, one thread, over the text files given (default: "
                        "$GPT_DATA_DIR/sotu/*.txt).");
  flags.add_positional("TEXT_FILE", &paths);
  if (!flags.parse(argc, argv)) return 0;
  const std::vector<std::string> texts = read_corpus(std::move(paths));
  int64_t bytes = 0;
  for (const std::string& text : texts) bytes += static_cast<int64_t>(text.size());

  std::vector<double> seconds;
  int64_t tokens = 0;
  std::vector<int32_t> ids;
  for (int pass = 0; pass < 3; ++pass) {
    gpt::data::Tokenizer tokenizer(gpt::data::default_vocab_file(), gpt::data::default_merge_file());
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& text : texts) {  // each file on its own, as gpt_prepare does
      ids.clear();
      tokenizer.encode(text, ids);
      tokens += static_cast<int64_t>(ids.size());
    }
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[1];
  std::fprintf(stderr,
               "tokenize: %zu files, %lld bytes, %lld tokens, %.3f s median of 3 passes (%.3f..%.3f)\n",
               texts.size(), static_cast<long long>(bytes), static_cast<long long>(tokens), median,
               seconds.front(), seconds.back());
  std::printf("{\"mb_per_s\": %.2f, \"tokens\": %lld}\n", bytes / 1e6 / median,
              static_cast<long long>(tokens));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/tokenize", [&] { return run(argc, argv); });
}
