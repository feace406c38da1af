// The GPT-2 tokenizer (issue 3, item 2) on chosen inputs: ids recorded from the reference JavaScript
// encoder (npm gpt-3-encoder 1.1.4), invalid UTF-8, random bytes, pathological long pieces, and the merge
// loop against a naive transcription of GPT-2's rule. Needs the vocabulary from $GPT_DATA_DIR.
#include "data/tokenizer.h"

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/shard.h"
#include "tests/data/test_files.h"

namespace {

using gpt::data::Tokenizer;
using gpt::data::testing::data_file;
using gpt::data::testing::read_bytes;
using Ids = std::vector<int32_t>;

Tokenizer load_gpt2() {
  return Tokenizer(data_file("encoder.json"), data_file("vocab.bpe"));
}

// GPT-2's bpe() as written in OpenAI's encoder.py, transcribed naively on strings of byte-to-unicode
// characters: find the lowest-ranked adjacent pair, merge all its occurrences left to right, repeat.
class NaiveBpe {
 public:
  NaiveBpe() {
    const auto encoder = nlohmann::json::parse(read_bytes(data_file("encoder.json")));
    for (const auto& [token, id] : encoder.items()) ids_[token] = id.get<int32_t>();
    std::istringstream merges(read_bytes(data_file("vocab.bpe")));
    std::string line;
    std::getline(merges, line);  // "#version: 0.2"
    for (int rank = 0; std::getline(merges, line);) {
      if (!line.empty()) ranks_[line] = rank++;
    }
    // The byte-to-unicode table, written out again from GPT-2's definition.
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool kept = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const int cp = kept ? b : 256 + extra++;
      chars_[b] =
          cp < 0x80 ? std::string(1, static_cast<char>(cp))
                    : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
  }

  Ids encode_piece(const std::string& piece) const {
    std::vector<std::string> word;
    for (unsigned char b : piece) word.push_back(chars_[b]);
    while (word.size() > 1) {
      int best = -1;
      size_t best_at = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = ranks_.find(word[i] + " " + word[i + 1]);
        if (it != ranks_.end() && (best < 0 || it->second < best)) best = it->second, best_at = i;
      }
      if (best < 0) break;
      const std::string first = word[best_at], second = word[best_at + 1];
      std::vector<std::string> merged;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(word[i++]);
        }
      }
      word = merged;
    }
    Ids out;
    for (const std::string& token : word) out.push_back(ids_.at(token));
    return out;
  }

 private:
  std::map<std::string, int32_t> ids_;
  std::map<std::string, int> ranks_;
  std::string chars_[256];
};

std::string random_bytes(std::mt19937_64& rng, size_t length, const std::string& alphabet = "") {
  std::string s(length, '\0');
  for (char& c : s) {
    c = alphabet.empty() ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % alphabet.size()];
  }
  return s;
}

}  // namespace

TEST_CASE("Hello world is 15496 995") {
  CHECK(load_gpt2().encode("Hello world") == Ids{15496, 995});
}

TEST_CASE("ids match the reference encoder: contractions, digits, whitespace runs, non-ASCII, emoji") {
  Tokenizer tokenizer = load_gpt2();
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"I'm sure they'll say it's what we've got, isn't it? You'd 're 'd DON'T",
       {40,   1101, 1654, 484, 1183, 910,  340, 338, 644, 356, 1053,  1392, 11,
        2125, 470,  340,  30,  921,  1549, 705, 260, 705, 67,  23917, 6,    51}},
      {"In 1776, 3.14159 and 1000000 people; 42nd 2nd ½ ٣٤",
       {818, 1596, 4304, 11,  513, 13,  1415,  19707, 290, 1802, 2388,
        661, 26,   5433, 358, 362, 358, 25208, 18923, 96,  149,  97}},
      {"a  b   c\n\n\nd \n e\t\tf   ",
       {64, 220, 275, 220, 220, 269, 628, 198, 67, 220, 198, 304, 197, 197, 69, 220, 220, 220}},
      {"   leading and trailing  \n", {220, 220, 3756, 290, 25462, 220, 220, 198}},
      {"Ünïcödé façade naïve Straße Ελληνικά русский 日本語のテキスト",
       {127,   250,   77,    26884, 66,    9101,  67,    2634,  24685, 16175, 671,   41492,
        15195, 39683, 68,    7377,  243,   39377, 39377, 138,   115,   26180, 29945, 43000,
        138,   105,   220,   21169, 35072, 21727, 21727, 31583, 18849, 140,   117,   10545,
        245,   98,    17312, 105,   45739, 252,   5641,  24336, 25084, 43302}},
      {"I ❤️ 🦀 and 👩‍👩‍👧 🇺🇸!",
       {40,  43074, 97,  37929, 12520, 99,    222, 290, 50169, 102, 447, 235, 41840,
        102, 447,   235, 41840, 100,   12520, 229, 118, 8582,  229, 116, 0}},
  };
  for (const auto& test_case : cases) {
    const std::string& text = test_case.first;
    const Ids& ids = test_case.second;
    CAPTURE(text);
    CHECK(tokenizer.encode(text) == ids);
    CHECK(tokenizer.decode(ids) == text);
  }
  CHECK(tokenizer.encode("").empty());
}

TEST_CASE("<|endoftext|> in text is ordinary text; id 50256 decodes to it") {
  Tokenizer tokenizer = load_gpt2();
  CHECK(tokenizer.encode("a<|endoftext|>b") == Ids{64, 27, 91, 437, 1659, 5239, 91, 29, 65});
  CHECK(tokenizer.vocab_size() == 50257);
  CHECK(tokenizer.decode(Ids{gpt::data::kEndOfText}) == "<|endoftext|>");
  CHECK_THROWS_AS(tokenizer.decode(Ids{50257}), gpt::data::DataError);
  CHECK_THROWS_AS(tokenizer.decode(Ids{-1}), gpt::data::DataError);
}

TEST_CASE("invalid UTF-8 encodes: each run of invalid bytes is a piece of its own") {
  Tokenizer tokenizer = load_gpt2();
  using Pieces = std::vector<std::pair<size_t, size_t>>;
  CHECK(tokenizer.split("abc\xFF\xFE"
                        "def") == Pieces{{0, 3}, {3, 5}, {5, 8}});
  CHECK(tokenizer.split(" \x80x") == Pieces{{0, 1}, {1, 2}, {2, 3}});
  CHECK(tokenizer.split("\xE2\x82") == Pieces{{0, 2}});  // a truncated 3-byte sequence at the end
  // Valid text around the bytes encodes exactly as it would alone.
  const Ids hello = tokenizer.encode("Hello"), world = tokenizer.encode(" world"),
            ff = tokenizer.encode("\xFF");
  CHECK(ff.size() == 1);
  Ids expected = hello;
  expected.insert(expected.end(), ff.begin(), ff.end());
  expected.insert(expected.end(), world.begin(), world.end());
  CHECK(tokenizer.encode("Hello\xFF world") == expected);
  for (const std::string bad :
       {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "caf\xE9", "\xE2\x82x\xF0\x9F\x98"}) {
    CAPTURE(bad);
    CHECK(tokenizer.decode(tokenizer.encode(bad)) == bad);
  }
}

TEST_CASE("decode(encode(x)) == x for random byte strings") {
  Tokenizer tokenizer = load_gpt2();
  std::mt19937_64 rng(20240520);
  const std::string text_like = "aeiou tnsrhl'\n\t,.0123456789\xC3\xA9\xE2\x80\x94\xF0\x9F\x98\x80\xFF";
  for (int i = 0; i < 3000; ++i) {
    const std::string bytes = random_bytes(rng, rng() % 300, i % 2 ? text_like : "");
    CAPTURE(i);
    REQUIRE(tokenizer.decode(tokenizer.encode(bytes)) == bytes);
  }
}

TEST_CASE("the heap-driven merge loop agrees with a naive transcription of GPT-2's rule") {
  Tokenizer tokenizer = load_gpt2();
  const NaiveBpe naive;
  std::mt19937_64 rng(7);
  std::vector<std::string> pieces = {
      "aaaaaaaaa",        "          ",   "=================", "!!!!!?!?!!",
      "\xFF\xFF\xFF\xFF", " ananananana", "mississippi",       "0000000000000"};
  for (int i = 0; i < 3000; ++i) pieces.push_back(random_bytes(rng, 1 + rng() % 40, i % 3 ? "abn =-!" : ""));
  for (const std::string& text : pieces) {
    Ids expected;
    for (const auto& [begin, end] : tokenizer.split(text)) {
      const Ids ids = naive.encode_piece(text.substr(begin, end - begin));
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    CAPTURE(text);
    REQUIRE(tokenizer.encode(text) == expected);
  }
}

TEST_CASE("very long pieces (runs of one character) encode quickly and round-trip") {
  Tokenizer tokenizer = load_gpt2();
  for (const char c : {' ', '=', 'a', '\n', '7'}) {
    const std::string run(1 << 20, c);
    const auto start = std::chrono::steady_clock::now();
    const Ids ids = tokenizer.encode(run);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CAPTURE(c);
    CHECK(seconds < 10.0);  // generous: guards against quadratic merging, which takes hours here
    CHECK(tokenizer.decode(ids) == run);
  }
}

TEST_CASE("a missing vocabulary file names the file and scripts/setup") {
  const std::string missing = gpt::data::testing::scratch_dir() + "/no_encoder.json";
  CHECK_THROWS_WITH_AS(Tokenizer(missing, "vocab.bpe"),
                       gpt::data::testing::contains(missing + ": cannot open the GPT-2 vocabulary"),
                       gpt::data::DataError);
  CHECK_THROWS_WITH_AS(Tokenizer(missing, "vocab.bpe"), gpt::data::testing::contains("scripts/setup"),
                       gpt::data::DataError);
  CHECK_THROWS_WITH_AS(Tokenizer(data_file("encoder.json"), missing), gpt::data::testing::contains(missing),
                       gpt::data::DataError);
}
