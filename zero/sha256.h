// SHA-256 (FIPS 180-4) of byte streams and files: checkpoint manifests record the digest of every shard file
// so a truncated or altered file is refused by name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::array<uint8_t, 32> digest();  // finishes; the object is then spent
  static std::string hex(const std::array<uint8_t, 32>& digest);

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Hex digest of a whole file; throws std::runtime_error naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace gpt
