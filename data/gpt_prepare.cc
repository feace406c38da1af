// gpt_prepare: text files -> GPT-2 token shards for training and validation (llm.c format, shard.h).
// Each file is one document, preceded by <|endoftext|> as in llm.c's data scripts; documents are sorted by
// path and the last fraction of them goes to validation, so the split is deterministic and no document is
// in both. Progress on stderr, one summary line on stdout, exit code 2 on any error the user can fix.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace {

constexpr const char* kSummary =
    R"(Tokenizes text files with GPT-2's BPE and writes PREFIX_train.bin and PREFIX_val.bin, token shards in
llm.c's format (what gpt_train --data-path and --valid-data-path read). Each file is one document and
is preceded by <|endoftext|> (id 50256). Documents are sorted by path; the last --val-fraction of them
(at least one) go to validation.

INPUT is a text file, a directory (its *.txt files), or a quoted glob such as 'texts/*.txt'.
Example: gpt_prepare --output-prefix "$GPT_DATA_DIR/sotu" "$GPT_DATA_DIR/sotu/")";

using gpt::UsageError;
using gpt::data::DataError;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string output_prefix;
  double val_fraction = 0.1;
  std::string vocab_file = gpt::data::default_vocab_file();
  std::string merge_file = gpt::data::default_merge_file();
  std::vector<std::string> inputs;
};

double parse_fraction(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !(value >= 0.0 && value < 1.0)) {
    throw UsageError("--val-fraction '" + text + "' is not a number in [0, 1); e.g. 0.1");
  }
  return value;
}

// Returns false when --help was printed.
bool parse_flags(int argc, char** argv, Options& options) {
  std::string val_fraction = "0.1";  // [0, 1): checked below, with its own message
  gpt::FlagParser flags("gpt_prepare", kSummary);
  flags.add_string("--output-prefix", &options.output_prefix,
                   "where to write, e.g. $GPT_DATA_DIR/sotu (directories are created)");
  flags.add_string("--val-fraction", &val_fraction,
                   "fraction of documents for validation, 0 <= F < 1; 0 writes no validation shard");
  flags.add_string("--vocab-file", &options.vocab_file, "GPT-2 encoder.json (from $GPT_DATA_DIR)");
  flags.add_string("--merge-file", &options.merge_file, "GPT-2 vocab.bpe (from $GPT_DATA_DIR)");
  flags.add_positional("INPUT", &options.inputs);
  if (!flags.parse(argc, argv)) return false;
  options.val_fraction = parse_fraction(val_fraction);
  if (options.output_prefix.empty()) throw UsageError("--output-prefix is required; see --help");
  if (options.inputs.empty()) throw UsageError("no input text files given; see gpt_prepare --help");
  return true;
}

// Files, directories (their *.txt) and globs -> sorted, de-duplicated document paths.
std::vector<std::string> list_documents(const std::vector<std::string>& inputs) {
  std::vector<std::string> paths;
  for (const std::string& input : inputs) {
    struct stat st {};
    if (stat(input.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::vector<std::string> texts;
      for (const auto& entry : std::filesystem::directory_iterator(input)) {
        if (entry.is_regular_file() && entry.path().extension() == ".txt")
          texts.push_back(entry.path().string());
      }
      if (texts.empty())
        throw DataError(input + ": directory has no *.txt files; name the text files instead");
      paths.insert(paths.end(), texts.begin(), texts.end());
    } else if (input.find_first_of("*?[") == std::string::npos) {
      if (stat(input.c_str(), &st) != 0) {
        throw DataError(input + ": cannot read text file (" + std::strerror(errno) + "); check the path");
      }
      paths.push_back(input);
    } else {
      try {
        const std::vector<std::string> matched = gpt::data::expand_data_path(input);
        paths.insert(paths.end(), matched.begin(), matched.end());
      } catch (const DataError&) {
        throw DataError(input + ": no text file matches this glob; check the pattern");
      }
    }
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  if (in) content << in.rdbuf();
  if (!in || in.bad()) {
    throw DataError(path + ": cannot read text file (" + std::strerror(errno) +
                    "); check that it exists and is readable, or leave it out");
  }
  return content.str();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A bar redrawn in place on a terminal; on a pipe or log file, a plain line at every tenth of the work. A bar
// left mid-line (an error stopped the work) is ended when the Progress goes, so the error gets its own line.
class Progress {
 public:
  explicit Progress(int64_t total_bytes) : total_(std::max<int64_t>(total_bytes, 1)), tty_(isatty(2)) {}
  ~Progress() {
    if (mid_line_) std::fputc('\n', stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done_bytes, size_t documents, size_t total_documents, int64_t tokens) {
    const int percent = static_cast<int>(100 * done_bytes / total_);
    if (!tty_ && percent / 10 == last_percent_ / 10) return;
    last_percent_ = percent;
    const double seconds = seconds_since(start_);
    const double mb_per_s = seconds > 0 ? done_bytes / 1e6 / seconds : 0;
    std::string bar(30, ' ');
    std::fill_n(bar.begin(), 30 * percent / 100, '#');
    std::fprintf(stderr, "%s[%s] %3d%%  %zu/%zu documents  %lld tokens  %.1f MB/s%s", tty_ ? "\r" : "",
                 bar.c_str(), percent, documents, total_documents, static_cast<long long>(tokens), mb_per_s,
                 tty_ ? "" : "\n");
    mid_line_ = tty_ && done_bytes < total_;
    if (tty_ && done_bytes >= total_) std::fputc('\n', stderr);
  }

 private:
  int64_t total_;
  bool tty_;
  bool mid_line_ = false;
  int last_percent_ = -1;
  Clock::time_point start_ = Clock::now();
};

void write_tokens(const std::string& path, const std::vector<int32_t>& ids) {
  const std::vector<uint16_t> tokens(ids.begin(), ids.end());  // ids < 50257 fit uint16
  gpt::data::write_shard(path, tokens);
}

int run(int argc, char** argv) {
  Options options;
  if (!parse_flags(argc, argv, options)) return 0;
  const Clock::time_point start = Clock::now();
  const std::vector<std::string> documents = list_documents(options.inputs);
  const size_t n = documents.size();
  size_t val_documents = 0;
  if (options.val_fraction > 0) {
    val_documents = std::max<size_t>(1, static_cast<size_t>(std::llround(options.val_fraction * n)));
    if (val_documents >= n) {
      throw UsageError(std::to_string(n) + " document(s) with --val-fraction " +
                       std::to_string(options.val_fraction) +
                       " leave none for training; give more files, or --val-fraction 0");
    }
  }
  gpt::data::Tokenizer tokenizer(options.vocab_file, options.merge_file);
  if (tokenizer.vocab_size() > 65536) {
    throw DataError(options.vocab_file + ": " + std::to_string(tokenizer.vocab_size()) +
                    " tokens do not fit the shards' uint16 ids; use GPT-2's encoder.json");
  }

  int64_t total_bytes = 0;
  for (const std::string& path : documents) {
    std::error_code error;
    total_bytes += static_cast<int64_t>(std::filesystem::file_size(path, error));
  }
  Progress progress(total_bytes);
  std::vector<int32_t> train, val;
  int64_t done_bytes = 0;
  for (size_t d = 0; d < n; ++d) {
    std::vector<int32_t>& ids = d < n - val_documents ? train : val;
    const std::string text = read_text(documents[d]);
    ids.push_back(gpt::data::kEndOfText);
    tokenizer.encode(text, ids);
    done_bytes += static_cast<int64_t>(text.size());
    progress.update(done_bytes, d + 1, n, static_cast<int64_t>(train.size() + val.size()));
  }

  const std::filesystem::path parent = std::filesystem::path(options.output_prefix).parent_path();
  std::error_code error;
  if (!parent.empty() && !std::filesystem::create_directories(parent, error) && error) {
    throw DataError(parent.string() + ": cannot create the output directory (" + error.message() +
                    "); choose another --output-prefix");
  }
  const std::string train_path = options.output_prefix + "_train.bin";
  const std::string val_path = options.output_prefix + "_val.bin";
  write_tokens(train_path, train);
  if (val_documents) write_tokens(val_path, val);

  std::printf(
      "gpt_prepare: %zu documents (%zu train, %zu val), %zu tokens (%zu train, %zu val), %lld bytes, "
      "%.2f s -> %s%s%s\n",
      n, n - val_documents, val_documents, train.size() + val.size(), train.size(), val.size(),
      static_cast<long long>(done_bytes), seconds_since(start), train_path.c_str(), val_documents ? ", " : "",
      val_documents ? val_path.c_str() : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("gpt_prepare", [&] { return run(argc, argv); });
}
