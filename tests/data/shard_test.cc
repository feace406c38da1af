// Token shards (issue 2, item 7): the llm.c byte layout, round trips, atomic writes, and the one-line
// errors for a wrong magic, a truncated body and an id >= the vocabulary, each naming file, problem, offset.
#include "data/shard.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/data/test_files.h"

namespace {

using gpt::data::DataError;
using namespace gpt::data::testing;

// A shard assembled by hand from the format's definition, independent of write_shard.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::string bytes(1024, '\0');
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, &count, 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

// The DataError message of reading `path`, or "" when it reads fine.
std::string read_error(const std::string& path, int vocab_size = 50257) {
  try {
    gpt::data::read_shard(path, vocab_size);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

void check_one_line(const std::string& message, const std::string& path) {
  CHECK(message.find('\n') == std::string::npos);
  CHECK(message.starts_with(path + ": "));
}

}  // namespace

TEST_CASE("write_shard writes llm.c's layout and read_shard reads it back") {
  const std::string path = scratch_dir() + "/round_trip.bin";
  const std::vector<uint16_t> tokens = {50256, 15496, 995, 0, 1, 50255, 7};
  gpt::data::write_shard(path, tokens);
  CHECK(read_bytes(path) == shard_bytes(20240520, 1, 7, tokens));
  CHECK(std::filesystem::file_size(path) == 1024 + 2 * tokens.size());
  CHECK(gpt::data::read_shard(path, 50257) == tokens);
  CHECK(gpt::data::shard_token_count(path) == 7);

  gpt::data::write_shard(path, {});  // an empty shard is valid and replaces the old file
  CHECK(gpt::data::read_shard(path, 50257).empty());
  for (const auto& entry : std::filesystem::directory_iterator(scratch_dir())) {
    CHECK_MESSAGE(entry.path().string().find(".tmp") == std::string::npos, "left behind " << entry.path());
  }
}

TEST_CASE("a shard with a wrong magic names the file, the problem and offset 0") {
  const std::string path = scratch_dir() + "/wrong_magic.bin";
  write_bytes(path, shard_bytes(20240521, 1, 2, {1, 2}));
  const std::string message = read_error(path);
  check_one_line(message, path);
  CHECK(message.find("wrong magic 20240521 at byte offset 0") != std::string::npos);
  CHECK(message.find("gpt_prepare") != std::string::npos);
}

TEST_CASE("a truncated body names the declared size and the offset where the file ends") {
  const std::string path = scratch_dir() + "/truncated.bin";
  std::string bytes = shard_bytes(20240520, 1, 100, std::vector<uint16_t>(100, 5));
  bytes.resize(1024 + 2 * 60 + 1);
  write_bytes(path, bytes);
  const std::string message = read_error(path);
  check_one_line(message, path);
  CHECK(message.find("truncated body") != std::string::npos);
  CHECK(message.find("declares 100 tokens, so 1224 bytes") != std::string::npos);
  CHECK(message.find("ends at byte offset 1145") != std::string::npos);
}

TEST_CASE("a token id >= the vocabulary size names its byte offset and the id") {
  const std::string path = scratch_dir() + "/bad_token.bin";
  write_bytes(path, shard_bytes(20240520, 1, 4, {10, 20, 50257, 30}));
  const std::string message = read_error(path);
  check_one_line(message, path);
  CHECK(message.find("token id 50257 at byte offset 1028 (token 2)") != std::string::npos);
  CHECK(message.find(">= the vocabulary size 50257") != std::string::npos);
  CHECK(read_error(path, 50258).empty());  // the same shard is fine for a larger vocabulary
}

TEST_CASE("other malformed shards: version, trailing bytes, short header, missing file") {
  const std::string dir = scratch_dir();
  write_bytes(dir + "/v2.bin", shard_bytes(20240520, 2, 0, {}));
  CHECK(read_error(dir + "/v2.bin").find("unsupported shard version 2 at byte offset 4") !=
        std::string::npos);
  write_bytes(dir + "/long.bin", shard_bytes(20240520, 1, 1, {3, 4}));
  CHECK(
      read_error(dir + "/long.bin").find("2 unexpected bytes after the last token, from byte offset 1026") !=
      std::string::npos);
  write_bytes(dir + "/short.bin", std::string(100, 'x'));
  CHECK(read_error(dir + "/short.bin").find("shorter than the 1024-byte shard header") != std::string::npos);
  write_bytes(dir + "/negative.bin", shard_bytes(20240520, 1, -5, {}));
  CHECK(read_error(dir + "/negative.bin").find("negative token count -5 at byte offset 8") !=
        std::string::npos);
  const std::string missing = read_error(dir + "/does_not_exist.bin");
  check_one_line(missing, dir + "/does_not_exist.bin");
  CHECK(missing.find("No such file") != std::string::npos);
}

TEST_CASE("write_shard into a missing directory is a DataError naming the path") {
  const std::string path = scratch_dir() + "/no/such/dir/x.bin";
  CHECK_THROWS_WITH_AS(gpt::data::write_shard(path, std::vector<uint16_t>{1}),
                       gpt::data::testing::contains("no/such/dir/x.bin"), DataError);
}

TEST_CASE("expand_data_path: a file, a sorted glob, and errors naming the pattern") {
  const std::string dir = scratch_dir() + "/glob";
  std::filesystem::create_directories(dir + "/sub_train_9.bin");  // a directory the glob must skip
  for (const char* name : {"sub_train_2.bin", "sub_train_10.bin", "sub_train_1.bin", "sub_val.bin"}) {
    gpt::data::write_shard(dir + "/" + name, std::vector<uint16_t>{1});
  }
  CHECK(gpt::data::expand_data_path(dir + "/sub_val.bin") == std::vector<std::string>{dir + "/sub_val.bin"});
  CHECK(gpt::data::expand_data_path(dir + "/sub_train_*.bin") ==
        std::vector<std::string>{dir + "/sub_train_1.bin", dir + "/sub_train_10.bin",
                                 dir + "/sub_train_2.bin"});
  CHECK_THROWS_WITH_AS(gpt::data::expand_data_path(dir + "/nothing_*.bin"),
                       gpt::data::testing::contains(dir + "/nothing_*.bin: no file matches"), DataError);
  CHECK_THROWS_WITH_AS(gpt::data::expand_data_path(dir), gpt::data::testing::contains("is a directory"),
                       DataError);
}
