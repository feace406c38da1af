// Loading GPT-2's encoder.json and vocab.bpe into byte strings and a merge table (see bpe_vocab.h).
#include "data/bpe_vocab.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "data/shard.h"

namespace gpt::data {

std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next_unprintable = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next_unprintable++;
  }
  return table;
}

void MergeTable::reserve(size_t rules) {
  size_t capacity = 1;
  int bits = 0;
  while (capacity < 2 * rules + 2) {
    capacity *= 2;
    ++bits;
  }
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key), s.merge);
  }
}

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if (2 * (size_ + 1) > slots_.size()) reserve(2 * (size_ + 1));
  const uint64_t key = pack(left, right);
  for (size_t slot = hash(key) & mask_;; slot = (slot + 1) & mask_) {
    Slot& s = slots_[slot];
    if (s.key == key) {
      s.merge = merge;
      return;
    }
    if (s.key == kEmpty) {
      s = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

namespace {

std::string read_file(const std::string& path, const char* what, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(path + ": cannot open the GPT-2 " + what + " (" + std::strerror(errno) +
                    "); run scripts/setup to fetch it into $GPT_DATA_DIR, or pass " + flag);
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// Turns a token as spelled in the files (UTF-8 of byte-to-unicode characters) back into its bytes.
// Returns false when the spelling uses a character outside the table.
bool unicode_to_bytes(std::string_view spelled, const std::unordered_map<char32_t, char>& inverse,
                      std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < spelled.size();) {
    const auto lead = static_cast<unsigned char>(spelled[i]);
    char32_t cp = 0;
    int length = 0;
    if (lead < 0x80) {
      cp = lead, length = 1;
    } else if ((lead & 0xE0) == 0xC0) {
      cp = lead & 0x1F, length = 2;  // the table only reaches U+0143, so two bytes suffice
    } else {
      return false;
    }
    if (i + length > spelled.size()) return false;
    for (int k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(spelled[i + k]) & 0x3F);
    const auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    bytes.push_back(it->second);
    i += length;
  }
  return !bytes.empty();
}

}  // namespace

BpeVocab load_bpe_vocab(const std::string& vocab_file, const std::string& merge_file) {
  std::unordered_map<char32_t, char> inverse;
  const auto table = byte_to_unicode();
  for (int b = 0; b < 256; ++b) inverse[table[b]] = static_cast<char>(b);
  const std::string malformed = "; the file is not GPT-2's, run scripts/setup to fetch a verified copy";

  BpeVocab vocab;
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(vocab_file, "vocabulary (encoder.json)", "--vocab-file"));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(vocab_file + ": not valid JSON (" + e.what() + ")" + malformed);
  }
  if (!encoder.is_object() || encoder.empty()) {
    throw DataError(vocab_file + ": expected a JSON object of token -> id" + malformed);
  }
  vocab.tokens.resize(encoder.size());
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(encoder.size());
  std::string bytes;
  for (const auto& [spelled, value] : encoder.items()) {
    const int64_t id = value.is_number_integer() ? value.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(encoder.size()) || !vocab.tokens[id].empty()) {
      throw DataError(vocab_file + ": token \"" + spelled + "\" has id " + value.dump() +
                      ", not a unique id in [0, " + std::to_string(encoder.size()) + ")" + malformed);
    }
    if (!unicode_to_bytes(spelled, inverse, bytes)) {
      throw DataError(vocab_file + ": token \"" + spelled + "\" (id " + std::to_string(id) +
                      ") is not spelled in GPT-2's byte-to-unicode alphabet" + malformed);
    }
    vocab.tokens[id] = bytes;
    ids.emplace(bytes, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(std::string(1, static_cast<char>(b)));
    if (it == ids.end()) {
      throw DataError(vocab_file + ": has no token for byte " + std::to_string(b) + malformed);
    }
    vocab.byte_ids[b] = it->second;
  }

  const std::string merges = read_file(merge_file, "merges (vocab.bpe)", "--merge-file");
  std::istringstream lines(merges);
  std::string line, left, right;
  int64_t line_number = 0;
  int32_t rank = 0;
  vocab.merges.reserve(ids.size());
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    const auto where = [&] {
      return merge_file + ": line " + std::to_string(line_number) + " \"" + line + "\"";
    };
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos ||
        !unicode_to_bytes(std::string_view(line).substr(0, space), inverse, left) ||
        !unicode_to_bytes(std::string_view(line).substr(space + 1), inverse, right)) {
      throw DataError(where() + " is not a merge of two byte-level tokens" + malformed);
    }
    const auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      throw DataError(where() + " names a token missing from " + vocab_file + malformed);
    }
    vocab.merges.insert(l->second, r->second, Merge{rank++, m->second});
  }
  if (rank == 0) throw DataError(merge_file + ": holds no merge rules" + malformed);
  return vocab;
}

}  // namespace gpt::data
