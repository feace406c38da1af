// GPT-2 byte-level BPE: PCRE2 pre-tokenization, a per-piece cache, and a heap-driven merge loop.
#include "data/tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include <pcre2.h>  // 8-bit code units: @pcre2 defines PCRE2_CODE_UNIT_WIDTH

#include "data/shard.h"

namespace gpt::data {

namespace {

// GPT-2's pattern, with \s spelled out as Unicode's White_Space set: that is what GPT-2's `regex` module
// means by \s, whereas PCRE2's \s also matches U+180E.
#define GPT2_WS \
  "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kPattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" GPT2_WS
                                 "\\p{L}\\p{N}]+|[" GPT2_WS "]+(?![^" GPT2_WS "])|[" GPT2_WS "]+";
#undef GPT2_WS

// Pieces longer than this are merged every time: caching them would cost memory and rarely hit.
constexpr size_t kMaxCachedPieceBytes = 64;
// Bound on the cache, so encoding a huge corpus cannot grow memory without end; when full it starts over.
constexpr size_t kMaxCacheEntries = 1 << 19;

}  // namespace

std::string default_data_dir() {
  if (const char* dir = std::getenv("GPT_DATA_DIR"); dir && *dir) return dir;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return std::string(cache) + "/gpt_zeropp";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/gpt_zeropp";
}
std::string default_vocab_file() {
  return default_data_dir() + "/encoder.json";
}
std::string default_merge_file() {
  return default_data_dir() + "/vocab.bpe";
}

struct Tokenizer::Regex {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  bool jit = false;

  Regex() {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: bytes that are not UTF-8 never match, so they fall between matches instead of
    // making the whole match fail; the tokenizer turns those gaps into pieces of their own.
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
    if (!code) throw std::logic_error("GPT-2 pattern does not compile: " + message(error));
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    match = pcre2_match_data_create_from_pattern(code, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (jit) {
      jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~Regex() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  static std::string message(int error) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error, buffer, sizeof buffer);
    return reinterpret_cast<const char*>(buffer);
  }

  // Finds the next match at or after `start`; returns false when there is none.
  bool next(std::string_view text, size_t start, size_t& begin, size_t& end) {
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const int rc = jit ? pcre2_jit_match(code, subject, text.size(), start, 0, match, context)
                       : pcre2_match(code, subject, text.size(), start, 0, match, context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw std::runtime_error("GPT-2 pre-tokenization failed: " + message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    begin = ovector[0];
    end = ovector[1];
    return true;
  }
};

Tokenizer::Tokenizer(const std::string& vocab_file, const std::string& merge_file)
    : vocab_(load_bpe_vocab(vocab_file, merge_file)), regex_(std::make_unique<Regex>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

template <typename OnPiece>
void Tokenizer::for_each_piece(std::string_view text, OnPiece&& on_piece) {
  size_t position = 0, begin = 0, end = 0;
  while (position < text.size()) {
    if (!regex_->next(text, position, begin, end)) begin = end = text.size();
    if (begin > position) on_piece(position, begin);  // bytes that are not UTF-8
    if (end > begin) on_piece(begin, end);
    position = end;
  }
}

std::vector<std::pair<size_t, size_t>> Tokenizer::split(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> pieces;
  for_each_piece(text, [&](size_t begin, size_t end) { pieces.emplace_back(begin, end); });
  return pieces;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  for_each_piece(text, [&](size_t begin, size_t end) { encode_piece(text.substr(begin, end - begin), out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) {
  std::vector<int32_t> ids;
  encode(text, ids);
  return ids;
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (piece.size() == 1) {
    out.push_back(vocab_.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    merge_piece(piece, out);
    return;
  }
  if (const auto hit = cache_.find(piece); hit != cache_.end()) {
    const auto first = cached_ids_.begin() + hit->second.offset;
    out.insert(out.end(), first, first + hit->second.count);
    return;
  }
  const size_t before = out.size();
  merge_piece(piece, out);
  if (cache_.size() >= kMaxCacheEntries) {
    cache_.clear();
    cached_ids_.clear();
  }
  const auto count = static_cast<uint32_t>(out.size() - before);
  cache_.emplace(std::string(piece), CacheEntry{static_cast<uint32_t>(cached_ids_.size()), count});
  cached_ids_.insert(cached_ids_.end(), out.begin() + before, out.end());
}

// GPT-2's rule: repeatedly take the adjacent pair with the lowest merge rank and merge every occurrence of
// it, left to right, in one sweep. Here each sweep pops that rank's candidates from a min-heap ordered by
// (rank, position), and pairs created by the sweep enter the heap only after it, so a newly formed pair
// cannot pre-empt the rest of the sweep. Cost O(n log n) instead of the naive O(n^2), which matters for long
// pieces such as runs of punctuation or whitespace.
void Tokenizer::merge_piece(std::string_view piece, std::vector<int32_t>& out) {
  const auto n = static_cast<int32_t>(piece.size());
  symbols_.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols_[i] =
        Symbol{vocab_.byte_ids[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  const auto candidate = [&](std::vector<Candidate>& into, int32_t left) {
    const int32_t right = symbols_[left].next;
    if (const Merge* m = vocab_.merges.find(symbols_[left].id, symbols_[right].id)) {
      into.push_back(Candidate{m->rank, left, symbols_[left].id, symbols_[right].id, m->merged_id});
    }
  };
  heap_.clear();
  for (int32_t i = 0; i + 1 < n; ++i) candidate(heap_, i);
  std::make_heap(heap_.begin(), heap_.end(), later);

  while (!heap_.empty()) {
    const int32_t rank = heap_.front().rank;
    pending_.clear();
    while (!heap_.empty() && heap_.front().rank == rank) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      const Candidate c = heap_.back();
      heap_.pop_back();
      Symbol& left = symbols_[c.left];
      // Stale when an earlier merge changed either side (a symbol's token only grows, so its old id never
      // comes back).
      if (left.id != c.left_id || left.next < 0 || symbols_[left.next].id != c.right_id) continue;
      Symbol& right = symbols_[left.next];
      left.id = c.merged_id;
      left.next = right.next;
      right.id = -1;
      if (left.next >= 0) symbols_[left.next].prev = c.left;
      if (left.prev >= 0) candidate(pending_, left.prev);
      if (left.next >= 0) candidate(pending_, c.left);
    }
    for (const Candidate& c : pending_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols_[i].next) out.push_back(symbols_[i].id);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw DataError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(vocab_size()) + ")");
  }
  return vocab_.tokens[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) text += token_bytes(id);
  return text;
}

}  // namespace gpt::data
