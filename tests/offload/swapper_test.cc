// The NVMe swapper (offload/swapper.h): random bytes survive write-then-read under every aio setting,
// requests overlap, statistics count what moved, misuse is refused, a full disk says so, and the folder
// checks name the problem and the config key.
#include "offload/swapper.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sched.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "tests/skip.h"

namespace {

namespace fs = std::filesystem;
using gpt::offload::AioConfig;
using gpt::offload::kDirectAlignment;
using gpt::offload::SwapError;
using gpt::offload::SwapFile;
using gpt::offload::Swapper;

// A fresh folder under Bazel's private TEST_TMPDIR (the system temp folder outside Bazel).
std::string temp_folder(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  fs::path path = fs::path(root != nullptr ? root : fs::temp_directory_path().string()) / ("swapper_" + name);
  fs::remove_all(path);
  fs::create_directories(path);
  return path.string();
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<unsigned char, FreeDeleter>;

AlignedBuffer aligned_buffer(uint64_t bytes) {
  return AlignedBuffer(static_cast<unsigned char*>(std::aligned_alloc(kDirectAlignment, bytes)));
}

void fill_random(unsigned char* data, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(rng());
}

// Odd numbers of 4 KiB blocks: smaller than, equal to and a little over one chunk of either block size.
const std::vector<uint64_t> kRequestBlocks = {1, 3, 17, 256, 257, 129};

uint64_t total_request_bytes() {
  uint64_t total = 0;
  for (uint64_t blocks : kRequestBlocks) total += blocks * kDirectAlignment;
  return total;
}

// Writes every request (all in flight at once), waits, reads them all back into a second buffer, compares.
void round_trip(const AioConfig& config, const std::string& folder, bool direct) {
  const uint64_t total = total_request_bytes();
  SwapFile file(folder + "/round_trip.swap", total, direct);
  AlignedBuffer source = aligned_buffer(total), back = aligned_buffer(total);
  fill_random(source.get(), total, config.block_size + config.queue_depth);
  std::memset(back.get(), 0, total);
  Swapper swapper(config);
  std::vector<Swapper::Ticket> writes, reads;
  uint64_t offset = 0;
  for (uint64_t blocks : kRequestBlocks) {
    writes.push_back(swapper.write(file, offset, source.get() + offset, blocks * kDirectAlignment));
    offset += blocks * kDirectAlignment;
  }
  for (Swapper::Ticket ticket : writes) swapper.wait(ticket);
  offset = 0;
  for (uint64_t blocks : kRequestBlocks) {
    reads.push_back(swapper.read(file, offset, back.get() + offset, blocks * kDirectAlignment));
    offset += blocks * kDirectAlignment;
  }
  // In reverse: a later request may end first, and waiting out of order must work.
  for (auto ticket = reads.rbegin(); ticket != reads.rend(); ++ticket) swapper.wait(*ticket);
  CHECK(std::memcmp(source.get(), back.get(), total) == 0);
  const Swapper::Stats stats = swapper.stats();
  CHECK(stats.bytes_written == total);
  CHECK(stats.bytes_read == total);
  CHECK(stats.write_busy_seconds > 0);
  CHECK(stats.read_busy_seconds > 0);
  CHECK(stats.wait_seconds >= 0);
}

}  // namespace

TEST_CASE("random bytes survive a write and a read under every aio setting") {
  const std::string folder = temp_folder("settings");
  const bool direct = gpt::offload::supports_direct_io(folder);
  MESSAGE("O_DIRECT in the test folder: " << direct);
  for (int threads : {1, 2}) {
    for (int depth : {1, 8}) {
      for (int64_t block : {int64_t{4096}, int64_t{1} << 20}) {
        for (bool single_submit : {false, true}) {
          for (bool overlap : {true, false}) {
            AioConfig config;
            config.thread_count = threads;
            config.queue_depth = depth;
            config.block_size = block;
            config.single_submit = single_submit;
            config.overlap_events = overlap;
            CAPTURE(threads);
            CAPTURE(depth);
            CAPTURE(block);
            CAPTURE(single_submit);
            CAPTURE(overlap);
            round_trip(config, folder, direct);
          }
        }
      }
    }
  }
  CHECK(fs::is_empty(folder));  // every SwapFile removed its file
}

TEST_CASE("buffered files (no O_DIRECT) round-trip too") {
  AioConfig config;
  config.block_size = 8192;
  config.queue_depth = 4;
  round_trip(config, temp_folder("buffered"), false);
}

TEST_CASE("a read completes while a large write is still in flight") {
  const std::string folder = temp_folder("overlap");
  const bool direct = gpt::offload::supports_direct_io(folder);
  const uint64_t small = 64 * 1024, large = 8 << 20;
  SwapFile file(folder + "/overlap.swap", small + large, direct);
  AlignedBuffer first = aligned_buffer(small), second = aligned_buffer(large), back = aligned_buffer(small);
  fill_random(first.get(), small, 1);
  fill_random(second.get(), large, 2);
  AioConfig config;
  config.block_size = 4096;  // many chunks, so the write is still going when the read is posted
  config.queue_depth = 2;
  config.thread_count = 2;
  Swapper swapper(config);
  swapper.wait(swapper.write(file, 0, first.get(), small));
  const Swapper::Ticket write = swapper.write(file, small, second.get(), large);
  const Swapper::Ticket read = swapper.read(file, 0, back.get(), small);
  swapper.wait(read);
  CHECK(std::memcmp(first.get(), back.get(), small) == 0);
  swapper.wait(write);
  swapper.wait(write);  // a second wait on a finished ticket returns at once
  AlignedBuffer whole = aligned_buffer(large);
  swapper.wait(swapper.read(file, small, whole.get(), large));
  CHECK(std::memcmp(second.get(), whole.get(), large) == 0);
  CHECK(swapper.stats().bytes_written == small + large);
  CHECK(swapper.stats().bytes_read == small + large);
}

TEST_CASE("wait_all waits for everything and the destructor for what nobody waited for") {
  const std::string folder = temp_folder("wait_all");
  const uint64_t bytes = 1 << 20;
  SwapFile file(folder + "/all.swap", bytes, gpt::offload::supports_direct_io(folder));
  AlignedBuffer data = aligned_buffer(bytes), back = aligned_buffer(bytes);
  fill_random(data.get(), bytes, 3);
  {
    Swapper swapper(AioConfig{});
    for (uint64_t offset = 0; offset < bytes; offset += 64 * 1024) {
      swapper.write(file, offset, data.get() + offset, 64 * 1024);
    }
    swapper.wait_all();
    CHECK(swapper.stats().bytes_written == bytes);
    swapper.read(file, 0, back.get(), bytes);
  }  // the destructor waits for the read
  CHECK(std::memcmp(data.get(), back.get(), bytes) == 0);
  Swapper swapper(AioConfig{});
  CHECK_THROWS_AS(swapper.wait(42), std::invalid_argument);
  CHECK(swapper.write(file, 0, data.get(), 0) > 0);  // an empty request is done at once
  swapper.wait_all();
}

TEST_CASE("misuse is refused before anything reaches the disk") {
  const std::string folder = temp_folder("misuse");
  SwapFile file(folder + "/misuse.swap", 64 * 1024, /*direct=*/true);
  AlignedBuffer data = aligned_buffer(128 * 1024);
  Swapper swapper(AioConfig{});
  CHECK_THROWS_AS(swapper.write(file, 60 * 1024, data.get(), 8192), std::invalid_argument);  // past the end
  CHECK_THROWS_AS(swapper.write(file, 100, data.get(), 4096), std::invalid_argument);        // offset
  CHECK_THROWS_AS(swapper.write(file, 0, data.get() + 8, 4096), std::invalid_argument);      // address
  CHECK_THROWS_AS(swapper.read(file, 0, data.get(), 1000), std::invalid_argument);           // size
  AioConfig bad;
  bad.block_size = 1000;
  CHECK_THROWS_WITH_AS(Swapper{bad}, doctest::Contains("aio.block_size"), gpt::UsageError);
  bad = AioConfig{};
  bad.queue_depth = 0;
  CHECK_THROWS_WITH_AS(Swapper{bad}, doctest::Contains("aio.queue_depth"), gpt::UsageError);
  bad = AioConfig{};
  bad.thread_count = 0;
  CHECK_THROWS_WITH_AS(Swapper{bad}, doctest::Contains("aio.thread_count"), gpt::UsageError);
}

TEST_CASE("a swap file has its size while it lives and is gone after") {
  const std::string folder = temp_folder("file");
  const std::string path = folder + "/sized.swap";
  {
    SwapFile file(path, 12345, /*direct=*/false);
    CHECK(fs::file_size(path) == 12345);
    CHECK(file.fd() >= 0);
    SwapFile aligned(path + ".direct", 12345, gpt::offload::supports_direct_io(folder));
    CHECK(fs::file_size(path + ".direct") == (aligned.direct() ? 16384u : 12345u));
  }
  CHECK_FALSE(fs::exists(path));
  CHECK(fs::is_empty(folder));
  CHECK_THROWS_WITH_AS(SwapFile(folder + "/missing/x.swap", 4096, false), doctest::Contains("missing/x.swap"),
                       SwapError);
}

TEST_CASE("a failed read or write says what, where and why in one line") {
  const std::string full =
      gpt::offload::describe_swap_failure("/nvme/run/rank0/optimizer.swap", true, 4096, 8 << 20, ENOSPC);
  CHECK(full.find("disk is full") != std::string::npos);
  CHECK(full.find("8388608 bytes") != std::string::npos);
  CHECK(full.find("8.00 MiB") != std::string::npos);
  CHECK(full.find("/nvme/run/rank0/optimizer.swap at offset 4096") != std::string::npos);
  CHECK(full.find(std::strerror(ENOSPC)) != std::string::npos);
  CHECK(full.find('\n') == std::string::npos);
  const std::string io = gpt::offload::describe_swap_failure("/nvme/x.swap", false, 0, 4096, EIO);
  CHECK(io.find("reading 4096 bytes") != std::string::npos);
  CHECK(io.find(std::strerror(EIO)) != std::string::npos);
  CHECK(io.find("disk is full") == std::string::npos);
  CHECK(gpt::offload::human_bytes(512) == "512 B");
  CHECK(gpt::offload::human_bytes(uint64_t{3} << 29) == "1.50 GiB");
}

namespace {

// In a child process with its own mount namespace: a 256 KiB tmpfs, then (1) a preallocated swap file larger
// than it and (2) a sparse one written past its size. Writes both errors to `out`, one per line. Exits 77
// when the sandbox cannot mount.
[[noreturn]] void fill_a_tiny_disk(const std::string& mount_point, int out) {
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=256k") != 0) {
    _exit(77);
  }
  std::string report;
  try {
    SwapFile file(mount_point + "/preallocated.swap", 1 << 20, false);
    report += "no error\n";
  } catch (const SwapError& error) {
    report += std::string(error.what()) + "\n";
  }
  try {
    SwapFile file(mount_point + "/sparse.swap", 1 << 20, false, /*preallocate=*/false);
    AlignedBuffer data = aligned_buffer(1 << 20);
    std::memset(data.get(), 7, 1 << 20);
    Swapper swapper(AioConfig{});
    swapper.wait(swapper.write(file, 0, data.get(), 1 << 20));
    report += "no error\n";
  } catch (const SwapError& error) {
    report += std::string(error.what()) + "\n";
  }
  const bool written = ::write(out, report.data(), report.size()) == static_cast<ssize_t>(report.size());
  _exit(written ? 0 : 1);
}

}  // namespace

TEST_CASE("a full disk stops a preallocation and a write with the path and the bytes") {
  const std::string mount_point = temp_folder("tiny_disk");
  int pipe_ends[2];
  REQUIRE(pipe(pipe_ends) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(pipe_ends[0]);
    fill_a_tiny_disk(mount_point, pipe_ends[1]);
  }
  close(pipe_ends[1]);
  std::string report;
  char chunk[4096];
  for (ssize_t n; (n = ::read(pipe_ends[0], chunk, sizeof chunk)) > 0;) report.append(chunk, n);
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    gpt::testing::skipped(
        "swapper full disk: no privilege to mount a tmpfs in a new mount namespace here; the full-disk "
        "message is checked by the message test only");
    return;
  }
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto newline = report.find('\n');
  REQUIRE(newline != std::string::npos);
  const std::string preallocated = report.substr(0, newline), written = report.substr(newline + 1);
  CHECK(preallocated.find("disk is full") != std::string::npos);
  CHECK(preallocated.find("preallocated.swap") != std::string::npos);
  CHECK(preallocated.find("1048576 bytes") != std::string::npos);
  CHECK(written.find("disk is full") != std::string::npos);
  CHECK(written.find("sparse.swap at offset 0") != std::string::npos);
  CHECK(written.find("1048576 bytes") != std::string::npos);
}

TEST_CASE("check_swap_folder names the problem, the path and the key") {
  const std::string key = "zero_optimization.offload_optimizer.nvme_path";
  const std::string folder = temp_folder("check");
  CHECK(gpt::offload::check_swap_folder(folder, 1 << 20, key).empty());

  const std::string missing = gpt::offload::check_swap_folder(folder + "/nope", 0, key);
  CHECK(missing.find("does not exist") != std::string::npos);
  CHECK(missing.find(folder + "/nope") != std::string::npos);
  CHECK(missing.find(key) != std::string::npos);

  std::ofstream(folder + "/a_file") << "x";
  const std::string not_dir = gpt::offload::check_swap_folder(folder + "/a_file", 0, key);
  CHECK(not_dir.find("is not a directory") != std::string::npos);
  CHECK(not_dir.find(key) != std::string::npos);

  // Root may write anywhere chmod allows nothing, so a read-only place is a pseudo filesystem: /proc takes
  // no new files. As another user, a folder without write permission must fail too.
  const std::string proc = gpt::offload::check_swap_folder("/proc", 0, key);
  CHECK(proc.find("is not writable") != std::string::npos);
  CHECK(proc.find(key) != std::string::npos);
  if (geteuid() != 0) {
    fs::create_directories(folder + "/locked");
    chmod((folder + "/locked").c_str(), 0500);
    CHECK(gpt::offload::check_swap_folder(folder + "/locked", 0, key).find("is not writable") !=
          std::string::npos);
  }

  const std::string small = gpt::offload::check_swap_folder(folder, uint64_t{1} << 62, key);
  CHECK(small.find("free, the swap files need 4096.00 PiB") != std::string::npos);
  CHECK(small.find(key) != std::string::npos);
  for (const std::string& message : {missing, not_dir, proc, small})
    CHECK(message.find('\n') == std::string::npos);
  fs::remove(folder + "/a_file");
  CHECK(fs::is_empty(folder));  // the probes left nothing
}

TEST_CASE("the O_DIRECT probe leaves nothing behind") {
  const std::string folder = temp_folder("probe");
  gpt::offload::supports_direct_io(folder);
  CHECK(fs::is_empty(folder));
  CHECK_FALSE(gpt::offload::supports_direct_io(folder + "/missing"));
}
