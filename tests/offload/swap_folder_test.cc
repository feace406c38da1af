// A rank's swap folder (offload/swap_folder.h): made and removed, a stale copy removed and reported, a folder
// held by a live run refused, bad nvme_paths refused with nothing left behind.
#include "offload/swap_folder.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/user_error.h"

namespace {

namespace fs = std::filesystem;
using gpt::offload::SwapFolder;

const std::string kKey = "zero_optimization.offload_optimizer.nvme_path";

std::string temp_folder(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  fs::path path = fs::path(root != nullptr ? root : fs::temp_directory_path().string()) / ("folder_" + name);
  fs::remove_all(path);
  fs::create_directories(path);
  return path.string();
}

bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  for (const std::string& note : notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a swap folder exists while its owner lives and is removed with it") {
  const std::string nvme = temp_folder("lifetime");
  {
    SwapFolder folder(nvme, "run1", 0, 1 << 20, kKey);
    CHECK(folder.path() == nvme + "/run1/rank0");
    CHECK(fs::is_directory(folder.path()));
    CHECK_FALSE(mentions(folder.notes(), "stale"));
    CHECK(mentions(folder.notes(), "O_DIRECT") == !folder.direct());
    auto file = folder.create_file("optimizer.swap", 64 * 1024);
    CHECK(fs::file_size(folder.path() + "/optimizer.swap") >= 64 * 1024);
    CHECK(file->direct() == folder.direct());
  }
  CHECK(fs::is_empty(nvme));
}

TEST_CASE("the run folder stays while another rank's folder is in it") {
  const std::string nvme = temp_folder("ranks");
  auto rank0 = std::make_unique<SwapFolder>(nvme, "run", 0, 0, kKey);
  auto rank1 = std::make_unique<SwapFolder>(nvme, "run", 1, 0, kKey);
  rank0.reset();
  CHECK(fs::is_directory(nvme + "/run/rank1"));
  CHECK_FALSE(fs::exists(nvme + "/run/rank0"));
  rank1.reset();
  CHECK(fs::is_empty(nvme));
}

TEST_CASE("a stale folder from a killed run is removed and reported") {
  const std::string nvme = temp_folder("stale");
  const std::string stale = nvme + "/run2/rank1";
  fs::create_directories(stale);
  std::ofstream(stale + "/optimizer.swap") << "old state";
  std::ofstream(stale + "/" + SwapFolder::kLockName) << "";  // its owner died: nobody holds the lock
  {
    SwapFolder folder(nvme, "run2", 1, 0, kKey);
    CHECK(mentions(folder.notes(), "removed a stale swap folder " + stale +
                                       " left by a run that did not exit cleanly; its contents are never "
                                       "reused as state"));
    CHECK_FALSE(fs::exists(stale + "/optimizer.swap"));
    CHECK(fs::is_directory(stale));
  }
  CHECK(fs::is_empty(nvme));
}

TEST_CASE("a folder that a live run holds is refused, and left to that run") {
  const std::string nvme = temp_folder("busy");
  SwapFolder first(nvme, "run3", 0, 0, kKey);
  auto file = first.create_file("params.swap", 4096);
  CHECK_THROWS_WITH_AS(
      SwapFolder(nvme, "run3", 0, 0, kKey),
      doctest::Contains(("another run is using the swap folder " + nvme + "/run3/rank0").c_str()),
      gpt::UsageError);
  CHECK_THROWS_WITH_AS(SwapFolder(nvme, "run3", 0, 0, kKey), doctest::Contains(kKey.c_str()),
                       gpt::UsageError);
  CHECK(fs::exists(first.path() + "/params.swap"));  // the refused one touched nothing
  SwapFolder other_rank(nvme, "run3", 1, 0, kKey);   // a different rank of the same run is fine
  CHECK_FALSE(mentions(other_rank.notes(), "stale"));
}

TEST_CASE("a bad nvme_path is refused with the key and nothing is left behind") {
  const std::string nvme = temp_folder("bad");
  CHECK_THROWS_WITH_AS(SwapFolder(nvme + "/missing", "run", 0, 0, kKey), doctest::Contains("does not exist"),
                       gpt::UsageError);
  CHECK_THROWS_WITH_AS(SwapFolder(nvme, "run", 0, uint64_t{1} << 62, kKey), doctest::Contains(kKey.c_str()),
                       gpt::UsageError);
  CHECK(fs::is_empty(nvme));
  // A stale folder is still cleared when the space check then fails, and the run folder goes with it.
  fs::create_directories(nvme + "/run/rank0");
  CHECK_THROWS_AS(SwapFolder(nvme, "run", 0, uint64_t{1} << 62, kKey), gpt::UsageError);
  CHECK(fs::is_empty(nvme));
}

TEST_CASE("an exception that unwinds through the owner removes the folder") {
  const std::string nvme = temp_folder("unwind");
  try {
    SwapFolder folder(nvme, "run", 0, 0, kKey);
    auto file = folder.create_file("x.swap", 8192);
    throw std::runtime_error("training failed");
  } catch (const std::runtime_error&) {
  }
  CHECK(fs::is_empty(nvme));
}
