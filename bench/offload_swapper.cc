// The NVMe swapper's bandwidth (offload/swapper.h) against fio on the same folder, in the same run: for each
// block size and queue depth of a small sweep (like DeepSpeed's ds_nvme_tune), the swapper writes a file of
// --size sequentially from one reused aligned buffer and reads it back, then
//   fio --name=... --ioengine=io_uring --direct=1 --bs=<block size> --iodepth=<queue depth> --numjobs=1
//       --size=<size> --rw=write   (then --rw=read)
// does the same. A table goes to stderr and one JSON line per (block size, queue depth, direction) to stdout:
// the swapper's GB/s, fio's GB/s and their ratio (the issue asks for >= 0.8). Writes of both, then reads of
// both (each reads its own file); which of the two goes first alternates between --repeats. Both use
// O_DIRECT, so no page cache needs dropping (a virtual disk may still be cached by its host: --repeats gives
// medians). A benchmark: it never fails on time.
//
// usage: offload_swapper --nvme-path DIR [--size 4GiB] [--block-sizes 256K,1M,4M] [--queue-depths 4,8,32]
//                        [--repeats N]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "offload/swapper.h"

namespace {

namespace fs = std::filesystem;
using gpt::offload::kDirectAlignment;

struct Options {
  std::string nvme_path;
  std::string size = "4GiB";
  std::string block_sizes = "256K,1M,4M";
  std::string queue_depths = "4,8,32";
  std::string buffer = "256MiB";
  int thread_count = 1;
  std::string fio = "fio";
  int repeats = 1;
};

// "4GiB", "512M", "256K", "1048576": binary units (K, M, G, T with or without "iB").
uint64_t parse_size(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  std::string unit(end);
  if (unit.size() == 3 && unit.substr(1) == "iB") unit = unit.substr(0, 1);
  const std::string units = "KMGT";
  uint64_t scale = 1;
  if (!unit.empty()) {
    const auto place =
        unit.size() == 1 ? units.find(static_cast<char>(std::toupper(unit[0]))) : std::string::npos;
    if (place == std::string::npos) {
      throw gpt::UsageError(flag + " '" + text + "' is not a size: write e.g. 4GiB, 512M or 1048576");
    }
    scale = uint64_t{1} << (10 * (place + 1));
  }
  if (end == text.c_str() || value <= 0) {
    throw gpt::UsageError(flag + " '" + text + "' is not a positive size: write e.g. 4GiB, 512M or 1048576");
  }
  return static_cast<uint64_t>(value * static_cast<double>(scale));
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

// Runs a program and returns its standard output; throws when it cannot start or exits non-zero.
std::string run_capture(const std::vector<std::string>& argv) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) throw std::runtime_error("pipe failed");
  const pid_t child = fork();
  if (child == 0) {
    dup2(pipe_ends[1], STDOUT_FILENO);
    close(pipe_ends[0]);
    close(pipe_ends[1]);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(pipe_ends[1]);
  std::string output;
  char chunk[65536];
  for (ssize_t n; (n = read(pipe_ends[0], chunk, sizeof chunk)) > 0;) output.append(chunk, n);
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw gpt::UsageError(argv[0] + " failed (exit " + std::to_string(WEXITSTATUS(status)) +
                          "): install fio or name it with --fio");
  }
  return output;
}

// fio's bandwidth in bytes per second for one job and direction.
double fio_bandwidth(const Options& options, uint64_t size, int64_t block, int depth, bool write,
                     const std::string& job) {
  const std::string output = run_capture(
      {options.fio, "--name=" + job, "--directory=" + options.nvme_path, "--ioengine=io_uring", "--direct=1",
       "--bs=" + std::to_string(block), "--iodepth=" + std::to_string(depth), "--numjobs=1",
       "--size=" + std::to_string(size), write ? "--rw=write" : "--rw=read", "--output-format=json"});
  const auto start = output.find('{');  // fio may print notes before its JSON
  if (start == std::string::npos) throw std::runtime_error("fio printed no JSON: " + output);
  const auto report = nlohmann::json::parse(output.substr(start));
  const auto& side = report.at("jobs").at(0).at(write ? "write" : "read");
  return side.contains("bw_bytes") ? side["bw_bytes"].get<double>() : side.at("bw").get<double>() * 1024;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

std::vector<double> gbps(std::vector<double> bytes_per_second) {
  for (double& value : bytes_per_second) value /= 1e9;
  return bytes_per_second;
}

struct Buffer {
  void operator()(void* p) const { std::free(p); }
};

// The swapper moves the whole file through two halves of `buffer` (one request each), posting the next
// request as soon as the one two back has finished, so the queue never runs dry. Returns bytes per second.
double swapper_bandwidth(const gpt::offload::SwapFile& file, const gpt::offload::AioConfig& config,
                         unsigned char* buffer, uint64_t buffer_bytes, bool write) {
  gpt::offload::Swapper swapper(config);
  const uint64_t request = std::min(buffer_bytes / 2 / kDirectAlignment * kDirectAlignment, file.bytes());
  std::vector<gpt::offload::Swapper::Ticket> tickets;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t offset = 0, index = 0; offset < file.bytes(); offset += request, ++index) {
    if (index >= 2) swapper.wait(tickets[index - 2]);
    unsigned char* half = buffer + (index % 2) * request;
    const uint64_t bytes = std::min(request, file.bytes() - offset);
    tickets.push_back(write ? swapper.write(file, offset, half, bytes)
                            : swapper.read(file, offset, half, bytes));
  }
  swapper.wait_all();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto stats = swapper.stats();
  if ((write ? stats.bytes_written : stats.bytes_read) != file.bytes()) {
    throw std::runtime_error("the swapper moved fewer bytes than the file holds");
  }
  return static_cast<double>(file.bytes()) / seconds;
}

bool parse(int argc, char** argv, Options& options) {
  gpt::FlagParser flags(
      "bench/offload_swapper",
      "The NVMe swapper's sequential write and read bandwidth against fio (io_uring, O_DIRECT) "
      "in the same folder and run, over a sweep of block sizes and queue depths.");
  flags.add_string("--nvme-path", &options.nvme_path,
                   "folder for the test files (required; needs twice --size free)");
  flags.add_string("--size", &options.size, "file size per measurement (e.g. 4GiB, 1GiB, 512M)");
  flags.add_string("--block-sizes", &options.block_sizes, "comma-separated aio.block_size values to sweep");
  flags.add_string("--queue-depths", &options.queue_depths,
                   "comma-separated aio.queue_depth values to sweep");
  flags.add_string("--buffer", &options.buffer,
                   "aligned buffer the swapper reuses (two requests of half each)");
  flags.add_int("--thread-count", &options.thread_count, "aio.thread_count of the swapper", 1, 64);
  flags.add_string("--fio", &options.fio, "the fio program");
  flags.add_int("--repeats", &options.repeats, "measurements of each setting (the median is reported)", 1,
                100);
  return flags.parse(argc, argv);
}

int run(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) return 0;
  if (options.nvme_path.empty())
    throw gpt::UsageError("--nvme-path is required: name a folder on the disk to test");
  const uint64_t size = parse_size(options.size, "--size");
  const uint64_t buffer_bytes = gpt::offload::align_up(parse_size(options.buffer, "--buffer"));
  if (std::string problem = gpt::offload::check_swap_folder(options.nvme_path, 2 * size, "--nvme-path");
      !problem.empty()) {
    throw gpt::UsageError(problem + " (or pass a smaller --size)");
  }
  const bool direct = gpt::offload::supports_direct_io(options.nvme_path);
  std::unique_ptr<unsigned char, Buffer> buffer(
      static_cast<unsigned char*>(std::aligned_alloc(kDirectAlignment, buffer_bytes)));
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i < buffer_bytes / 8; ++i) reinterpret_cast<uint64_t*>(buffer.get())[i] = rng();
  std::fprintf(stderr, "%-9s %5s %-5s %12s %12s %7s   (size %s, O_DIRECT %s, %d thread(s))\n", "block",
               "depth", "dir", "swapper GB/s", "fio GB/s", "ratio", gpt::offload::human_bytes(size).c_str(),
               direct ? "yes" : "no", options.thread_count);
  const std::string job = "offload_swapper_fio_" + std::to_string(getpid());
  for (const std::string& block_text : split(options.block_sizes)) {
    for (const std::string& depth_text : split(options.queue_depths)) {
      gpt::offload::AioConfig config;
      config.block_size = static_cast<int64_t>(parse_size(block_text, "--block-sizes"));
      config.queue_depth = std::stoi(depth_text);
      config.thread_count = options.thread_count;
      const uint64_t file_bytes = size / config.block_size * config.block_size;  // whole blocks, as fio does
      // Same-direction measurements run back to back, so a change in the disk's state (the host's cache,
      // other tenants) hits both; which of the two goes first alternates between repeats, and each number is
      // the median of --repeats.
      std::vector<double> samples[2][2];  // [swapper, fio][read, write]
      for (int repeat = 0; repeat < options.repeats; ++repeat) {
        gpt::offload::SwapFile file((fs::path(options.nvme_path) / (job + ".swap")).string(), file_bytes,
                                    direct);
        for (bool write : {true, false}) {
          for (int turn = 0; turn < 2; ++turn) {
            if ((turn + repeat) % 2 == 0) {
              samples[0][write].push_back(swapper_bandwidth(file, config, buffer.get(), buffer_bytes, write));
            } else {
              samples[1][write].push_back(
                  fio_bandwidth(options, file_bytes, config.block_size, config.queue_depth, write, job));
            }
          }
        }
        fs::remove(fs::path(options.nvme_path) / (job + ".0.0"));
      }
      double swapper[2], fio[2];
      for (int write : {0, 1})
        swapper[write] = median(samples[0][write]), fio[write] = median(samples[1][write]);
      for (int write : {1, 0}) {
        const double ratio = swapper[write] / fio[write];
        std::fprintf(stderr, "%-9s %5d %-5s %12.3f %12.3f %7.3f\n", block_text.c_str(), config.queue_depth,
                     write ? "write" : "read", swapper[write] / 1e9, fio[write] / 1e9, ratio);
        nlohmann::ordered_json line = {{"bench", "offload_swapper"},
                                       {"direction", write ? "write" : "read"},
                                       {"block_size", config.block_size},
                                       {"queue_depth", config.queue_depth},
                                       {"thread_count", config.thread_count},
                                       {"size", file_bytes},
                                       {"direct", direct},
                                       {"repeats", options.repeats},
                                       {"swapper_gbps", swapper[write] / 1e9},
                                       {"fio_gbps", fio[write] / 1e9},
                                       {"swapper_samples_gbps", gbps(samples[0][write])},
                                       {"fio_samples_gbps", gbps(samples[1][write])},
                                       {"ratio", ratio}};
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/offload_swapper", [&] { return run(argc, argv); });
}
