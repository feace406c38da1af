// The NVMe tier of ZeRO-Infinity: swap files and an asynchronous swapper that reads and writes them through
// io_uring with O_DIRECT (the page cache would double the memory and hide the disk's real bandwidth).
//
// A request (read or write of `bytes` at `offset` of a swap file) is split into aio.block_size chunks that
// worker threads (aio.thread_count, each with its own ring) keep in flight, up to aio.queue_depth per thread,
// while the caller computes; wait(ticket) returns when every chunk of that request has completed. This is
// what lets the optimizer read sub-group i+1 and write sub-group i-1 while it updates sub-group i.
//
// With O_DIRECT the buffer address, the offset and the size of each request must be multiples of
// kDirectAlignment; swap files are laid out so they are (see align_up). A filesystem without O_DIRECT
// (tmpfs, some overlays) falls back to buffered I/O, and SwapFile::direct() says so for the banner.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace gpt::offload {

inline constexpr uint64_t kDirectAlignment = 4096;
inline uint64_t align_up(uint64_t bytes, uint64_t alignment = kDirectAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// DeepSpeed's "aio" section, with its defaults.
struct AioConfig {
  int64_t block_size = 1 << 20;  // bytes per chunk submitted to the kernel
  int queue_depth = 8;           // chunks in flight per worker thread
  int thread_count = 1;          // worker threads, each with its own ring (alias intra_op_parallelism)
  bool single_submit = false;    // submit chunks one system call each instead of in batches
  bool overlap_events = true;    // submit new chunks while completions are reaped (false: drain, then refill)
  bool use_gds = false;          // GPUDirect Storage: accepted, without effect (reported in the banner)
};

// A read or write failed (the disk filled, an I/O error): what(), one line, names the file, the offset and
// the bytes, and the system's reason.
class SwapError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Empty when `folder` exists, is a directory, is writable and has at least `bytes_needed` free; otherwise one
// line naming the path, the problem and the fix (for `key`, the config key that named the folder).
std::string check_swap_folder(const std::string& folder, uint64_t bytes_needed, const std::string& key);
// Whether files in `folder` can be opened with O_DIRECT (tries a small temporary file, then removes it).
bool supports_direct_io(const std::string& folder);

// A size for people: "512 B", "4.00 KiB", "1.50 GiB".
std::string human_bytes(uint64_t bytes);
// The one line a SwapError carries for a read or write of `bytes` at `offset` of `path` that failed with
// errno `error_number`: the file, the offset, the bytes and the system's reason; for ENOSPC it says that the
// disk is full, how many bytes were being written, and the fix.
std::string describe_swap_failure(const std::string& path, bool write, uint64_t offset, uint64_t bytes,
                                  int error_number);

// One file of a fixed size, created (and preallocated) when opened and removed when destroyed.
class SwapFile {
 public:
  SwapFile(std::string path, uint64_t bytes, bool direct);
  // preallocate false leaves the file sparse (ftruncate only): its blocks are taken when written, so a full
  // disk shows up as a failed write instead of a failed open (the tests use it for that path).
  SwapFile(std::string path, uint64_t bytes, bool direct, bool preallocate);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }
  bool direct() const { return direct_; }
  int fd() const { return fd_; }

 private:
  std::string path_;
  uint64_t bytes_ = 0;
  bool direct_ = false;
  int fd_ = -1;
};

class Swapper {
 public:
  using Ticket = uint64_t;
  struct Stats {
    uint64_t bytes_read = 0, bytes_written = 0;
    double read_busy_seconds = 0, write_busy_seconds = 0;  // time with at least one read (write) in flight
    double wait_seconds = 0;                               // time callers spent blocked in wait()
  };

  explicit Swapper(const AioConfig& config);
  ~Swapper();  // waits for everything in flight
  Swapper(const Swapper&) = delete;
  Swapper& operator=(const Swapper&) = delete;

  // Post a request; `buffer` must stay valid (and, for writes, unchanged) until wait() on its ticket returns.
  Ticket read(const SwapFile& file, uint64_t offset, void* buffer, uint64_t bytes);
  Ticket write(const SwapFile& file, uint64_t offset, const void* buffer, uint64_t bytes);
  // Blocks until the request is complete; throws SwapError if any of its chunks failed.
  void wait(Ticket ticket);
  void wait_all();

  Stats stats() const;
  const AioConfig& config() const { return config_; }

 private:
  struct Impl;
  AioConfig config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpt::offload
