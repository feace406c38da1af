// GPT-2's vocabulary and merge table as the tokenizer uses them: every token as raw bytes, and each merge
// rule as a pair of token ids with its rank and the id it produces. Loaded from OpenAI's encoder.json and
// vocab.bpe, whose strings spell bytes through GPT-2's byte-to-unicode table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gpt::data {

// GPT-2's byte-to-unicode table: printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to their own code
// point; the other 68 bytes, in increasing order, map to U+0100, U+0101, ... so every byte is a visible
// character in the JSON and merge files.
std::array<char32_t, 256> byte_to_unicode();

// One merge rule: the pair it applies to is the key of the table; rank orders rules (lower merges first).
struct Merge {
  int32_t rank;
  int32_t merged_id;
};

// Open-addressing hash table from a pair of token ids to its merge rule. The tokenizer looks pairs up in
// its inner loop, where std::unordered_map's node chasing would be the bottleneck.
class MergeTable {
 public:
  void reserve(size_t rules);
  // Inserts or replaces (a later rule for the same pair wins, as in GPT-2's dict of ranks).
  void insert(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t slot = hash(key);; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }

  std::vector<Slot> slots_ = std::vector<Slot>(1);
  size_t mask_ = 0;
  int shift_ = 63;
  size_t size_ = 0;
};

struct BpeVocab {
  std::vector<std::string> tokens;      // id -> the token's bytes
  std::array<int32_t, 256> byte_ids{};  // byte -> id of the single-byte token
  MergeTable merges;
};

// Loads encoder.json (token string -> id) and vocab.bpe ("#version" line, then one "left right" merge per
// line, in rank order). Throws DataError naming the file, the problem and scripts/setup when a file is
// missing or malformed.
BpeVocab load_bpe_vocab(const std::string& vocab_file, const std::string& merge_file);

}  // namespace gpt::data
