// GPT-2's byte-level BPE tokenizer, token for token identical to OpenAI's encoder: text is split by GPT-2's
// pre-tokenization pattern (Unicode letters, numbers, contractions, whitespace runs), each piece's bytes are
// merged by rank, and decoding concatenates the tokens' bytes. Any byte string encodes (invalid UTF-8 too)
// and decodes back to itself. <|endoftext|> (id 50256) is never produced from text: tools insert it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/bpe_vocab.h"

namespace gpt::data {

inline constexpr int32_t kEndOfText = 50256;

// Where the fetched data lives: $GPT_DATA_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/gpt_zeropp, the same
// default as scripts/env.sh.
std::string default_data_dir();
std::string default_vocab_file();  // <data dir>/encoder.json
std::string default_merge_file();  // <data dir>/vocab.bpe

// Not thread-safe: encode() keeps a cache of pieces already merged and the regex's match state. Use one
// Tokenizer per thread; the loaded vocabulary is small (a few MB) and loads in a fraction of a second.
class Tokenizer {
 public:
  // Throws DataError naming the file and scripts/setup when a file is missing or malformed.
  Tokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out);
  std::vector<int32_t> encode(std::string_view text);

  // The bytes of the tokens; throws DataError for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;
  const std::string& token_bytes(int32_t id) const;

  int vocab_size() const { return static_cast<int>(vocab_.tokens.size()); }

  // The pre-tokenization alone, as [begin, end) byte ranges covering the whole text in order. Runs of
  // bytes that are not valid UTF-8 become pieces of their own. Exposed for tests.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text);

 private:
  struct Regex;  // PCRE2 state, kept out of this header
  struct CacheEntry {
    uint32_t offset;
    uint32_t count;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  template <typename OnPiece>
  void for_each_piece(std::string_view text, OnPiece&& on_piece);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);
  void merge_piece(std::string_view piece, std::vector<int32_t>& out);

  BpeVocab vocab_;
  std::unique_ptr<Regex> regex_;
  std::unordered_map<std::string, CacheEntry, StringHash, std::equal_to<>> cache_;
  std::vector<int32_t> cached_ids_;
  // Scratch buffers of the merge loop, kept to avoid allocating per piece.
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, left, left_id, right_id, merged_id;
  };
  std::vector<Symbol> symbols_;
  std::vector<Candidate> heap_, pending_;
};

}  // namespace gpt::data
