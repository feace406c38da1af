// The NVMe swapper (offload/swapper.h): swap files, the checks of a swap folder, and the io_uring workers
// that keep a request's chunks in flight while the caller computes.
//
// Requests are split into chunks on one shared queue; each worker thread owns a ring and takes chunks from
// the queue whenever it has a free slot (up to aio.queue_depth), so several requests stream back to back with
// no gap: the next chunk is submitted as soon as a completion frees a slot. A completion that moved fewer
// bytes than asked is resubmitted for the rest. One mutex guards the queue, the requests and the statistics;
// a worker takes it once per batch of submissions and once per batch of completions, not per byte.
#include "offload/swapper.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/user_error.h"

namespace gpt::offload {
namespace {

using Clock = std::chrono::steady_clock;

// strerror is not thread-safe; the generic category's message is.
std::string reason_of(int error_number) {
  return std::generic_category().message(error_number);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A name for a probe file in `folder` that no other process picks at the same time.
std::string probe_path(const std::string& folder, const char* what) {
  static std::atomic<uint64_t> counter{0};
  return folder + "/." + what + "." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

// Creates a file in `folder` and removes it again; returns 0 or the errno that stopped it.
int try_create_file(const std::string& folder) {
  const std::string path = probe_path(folder, "swap_probe");
  const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  close(fd);
  unlink(path.c_str());
  return 0;
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit + 1 < 5) value /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string describe_swap_failure(const std::string& path, bool write, uint64_t offset, uint64_t bytes,
                                  int error_number) {
  const std::string size = std::to_string(bytes) + " bytes (" + human_bytes(bytes) + ")";
  const std::string where = path + " at offset " + std::to_string(offset);
  if (error_number == ENOSPC && write) {
    return "the disk is full: writing " + size + " to " + where + " failed (" + reason_of(error_number) +
           "); free space on that disk or set nvme_path to a folder on a larger one";
  }
  return std::string(write ? "writing " : "reading ") + size + (write ? " to " : " from ") + where +
         " failed: " + reason_of(error_number);
}

std::string check_swap_folder(const std::string& folder, uint64_t bytes_needed, const std::string& key) {
  const std::string named = key + " '" + folder + "'";
  if (folder.empty()) return key + " is empty: set it to a folder on a fast local disk";
  struct stat info {};
  if (stat(folder.c_str(), &info) != 0) {
    if (errno == ENOENT) {
      return named + " does not exist: create it (mkdir -p " + folder + ") or set " + key +
             " to an existing folder";
    }
    return named + " cannot be examined (" + reason_of(errno) + "): set " + key + " to a folder you can use";
  }
  if (!S_ISDIR(info.st_mode)) return named + " is not a directory: set " + key + " to a folder";
  // access() says yes to root everywhere; creating a file also catches read-only and pseudo filesystems.
  const int create_error = access(folder.c_str(), W_OK | X_OK) != 0 ? errno : try_create_file(folder);
  if (create_error != 0) {
    return named + " is not writable (" + reason_of(create_error) + "): make it writable or set " + key +
           " to a folder you can write";
  }
  struct statvfs space {};
  if (statvfs(folder.c_str(), &space) != 0) {
    return named + ": cannot read its free space (" + reason_of(errno) + "): set " + key +
           " to a folder on a local disk";
  }
  const uint64_t available = static_cast<uint64_t>(space.f_bavail) * space.f_frsize;
  if (available < bytes_needed) {
    return named + " has " + human_bytes(available) + " free, the swap files need " +
           human_bytes(bytes_needed) + " (" + std::to_string(bytes_needed) +
           " bytes): free space there or set " + key + " to a folder on a larger disk";
  }
  return "";
}

bool supports_direct_io(const std::string& folder) {
  const std::string path = probe_path(folder, "direct_probe");
  const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  void* block = std::aligned_alloc(kDirectAlignment, kDirectAlignment);
  std::memset(block, 0, kDirectAlignment);
  const bool written = pwrite(fd, block, kDirectAlignment, 0) == static_cast<ssize_t>(kDirectAlignment);
  std::free(block);
  close(fd);
  unlink(path.c_str());
  return written;
}

// ---------------------------------------------------------------------------------------------- SwapFile

SwapFile::SwapFile(std::string path, uint64_t bytes, bool direct)
    : SwapFile(std::move(path), bytes, direct, true) {}

SwapFile::SwapFile(std::string path, uint64_t bytes, bool direct, bool preallocate)
    : path_(std::move(path)), bytes_(bytes), direct_(direct) {
  const int flags = O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0);
  fd_ = open(path_.c_str(), flags, 0600);
  if (fd_ < 0) {
    const int error = errno;
    throw SwapError("cannot create the swap file " + path_ + ": " + reason_of(error) +
                    (error == EINVAL && direct ? " (the filesystem refuses O_DIRECT)" : ""));
  }
  // Direct I/O moves whole 4 KiB blocks, so the file's last block is whole too.
  const uint64_t size = direct ? align_up(bytes) : bytes;
  int error = 0;
  if (preallocate && size > 0 && fallocate(fd_, 0, 0, static_cast<off_t>(size)) != 0) error = errno;
  // Filesystems without fallocate get a sparse file; its blocks are taken as it is written.
  if (!preallocate || error == EOPNOTSUPP || error == ENOSYS) {
    error = ftruncate(fd_, static_cast<off_t>(size)) != 0 ? errno : 0;
  }
  if (error != 0) {
    close(fd_);
    unlink(path_.c_str());
    fd_ = -1;
    throw SwapError(error == ENOSPC ? describe_swap_failure(path_, true, 0, size, error)
                                    : "cannot size the swap file " + path_ + " to " + std::to_string(size) +
                                          " bytes: " + reason_of(error));
  }
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) close(fd_);
  unlink(path_.c_str());
}

// ----------------------------------------------------------------------------------------------- Swapper

namespace {

struct Request {
  std::string path;
  bool write = false;
  uint64_t offset = 0, bytes = 0;
  uint64_t pending_chunks = 0;
  bool done = false;
  std::string error;  // the first failure, as SwapError will say it
};

struct Chunk {
  Request* request = nullptr;  // owned by Impl::requests until waited for (never before the last chunk ends)
  int fd = -1;
  bool write = false;
  char* buffer = nullptr;  // where the rest of the chunk goes (advanced by short transfers)
  uint64_t offset = 0;     // the file offset of the rest
  uint64_t remaining = 0;
  uint64_t transferred = 0;
  int error = 0;  // errno of a failure; -1 for a read that met the end of the file
};

}  // namespace

struct Swapper::Impl {
  AioConfig config;
  std::mutex mutex;
  std::condition_variable work_ready;     // idle workers wait here
  std::condition_variable request_ended;  // callers of wait() wait here
  std::deque<Chunk> queue;
  std::unordered_map<Ticket, std::shared_ptr<Request>> requests;
  Ticket next_ticket = 1;
  bool stopping = false;
  // Statistics, under `mutex`; index 0 reads, 1 writes.
  uint64_t bytes_moved[2] = {0, 0};
  int chunks_in_flight[2] = {0, 0};
  Clock::time_point busy_since[2];
  double busy_seconds[2] = {0, 0};
  double wait_seconds = 0;

  class Worker;
  std::vector<std::unique_ptr<Worker>> workers;

  // Under `mutex`: a chunk went to (left) the kernel.
  void count_submitted(bool write) {
    if (chunks_in_flight[write]++ == 0) busy_since[write] = Clock::now();
  }
  void count_ended(const Chunk& chunk);
  Ticket post(const SwapFile& file, uint64_t offset, char* buffer, uint64_t bytes, bool write);
  // Under `lock`: waits for the request, forgets it and returns its error ("" when it succeeded, or when
  // another thread waiting for the same ticket took the error first).
  std::string finish(std::unique_lock<std::mutex>& lock, Ticket ticket, std::shared_ptr<Request> request);
};

void Swapper::Impl::count_ended(const Chunk& chunk) {
  Request& request = *chunk.request;
  bytes_moved[chunk.write] += chunk.transferred;
  if (chunk.error != 0 && request.error.empty()) {
    request.error =
        chunk.error == -1
            ? "reading " + std::to_string(request.bytes) + " bytes from " + request.path + " at offset " +
                  std::to_string(request.offset) + " failed: the file ended at offset " +
                  std::to_string(chunk.offset)
            : describe_swap_failure(request.path, request.write, request.offset, request.bytes, chunk.error);
  }
  if (--request.pending_chunks == 0) request.done = true;
}

// One thread and its ring. Slots hold the chunks in flight; a completion's user data is its slot.
class Swapper::Impl::Worker {
 public:
  explicit Worker(Impl& impl) : impl_(impl), slots_(impl.config.queue_depth) {
    const int error = io_uring_queue_init(static_cast<unsigned>(impl.config.queue_depth), &ring_, 0);
    if (error < 0) {
      throw SwapError("cannot set up an io_uring ring of " + std::to_string(impl.config.queue_depth) +
                      " entries: " + reason_of(-error) +
                      " (io_uring may be disabled: see /proc/sys/kernel/io_uring_disabled)");
    }
    for (int slot = impl.config.queue_depth - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  }
  ~Worker() {
    if (thread_.joinable()) thread_.join();
    io_uring_queue_exit(&ring_);
  }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void join() { thread_.join(); }

 private:
  void run() {
    for (;;) {
      // overlap_events false: the ring drains completely before it takes new chunks.
      if ((impl_.config.overlap_events || in_flight_ == 0) && !refill()) return;
      if (in_flight_ > 0) reap();
    }
  }
  bool refill();
  void reap();
  void prepare(Chunk& chunk);
  void submit();
  bool handle(io_uring_cqe* cqe, std::vector<Chunk*>& ended);

  Impl& impl_;
  io_uring ring_{};
  std::vector<Chunk> slots_;
  std::vector<int> free_slots_;
  int in_flight_ = 0;
  std::thread thread_;
};

// Takes queued chunks into free slots and submits them; blocks while there is nothing to do. Returns false
// when the swapper is stopping and this worker has nothing in flight.
bool Swapper::Impl::Worker::refill() {
  std::vector<Chunk*> taken;
  {
    std::unique_lock lock(impl_.mutex);
    if (in_flight_ == 0) impl_.work_ready.wait(lock, [&] { return impl_.stopping || !impl_.queue.empty(); });
    if (in_flight_ == 0 && impl_.queue.empty()) return false;
    bool any_ended = false;
    while (!free_slots_.empty() && !impl_.queue.empty()) {
      Chunk chunk = impl_.queue.front();
      impl_.queue.pop_front();
      if (!chunk.request->error.empty()) {  // the request already failed: skip the rest of it
        impl_.count_ended(chunk);
        any_ended |= chunk.request->done;
        continue;
      }
      Chunk& slot = slots_[free_slots_.back()];
      free_slots_.pop_back();
      slot = chunk;
      impl_.count_submitted(chunk.write);
      taken.push_back(&slot);
    }
    if (any_ended) impl_.request_ended.notify_all();
  }
  for (Chunk* chunk : taken) {
    prepare(*chunk);
    ++in_flight_;
    if (impl_.config.single_submit) submit();
  }
  if (!impl_.config.single_submit && !taken.empty()) submit();
  return true;
}

void Swapper::Impl::Worker::prepare(Chunk& chunk) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  // The ring has a queue_depth of entries and never more chunks than that in flight, so this cannot fail.
  if (sqe == nullptr) {
    std::fprintf(stderr, "offload::Swapper: io_uring submission queue unexpectedly full\n");
    std::abort();
  }
  const auto length = static_cast<unsigned>(chunk.remaining);
  if (chunk.write) {
    io_uring_prep_write(sqe, chunk.fd, chunk.buffer, length, chunk.offset);
  } else {
    io_uring_prep_read(sqe, chunk.fd, chunk.buffer, length, chunk.offset);
  }
  io_uring_sqe_set_data(sqe, &chunk);
}

void Swapper::Impl::Worker::submit() {
  for (;;) {
    const int result = io_uring_submit(&ring_);
    if (result >= 0) return;
    if (result != -EINTR && result != -EAGAIN && result != -EBUSY) {
      std::fprintf(stderr, "offload::Swapper: io_uring_submit failed: %s\n", reason_of(-result).c_str());
      std::abort();
    }
    std::this_thread::yield();
  }
}

// One completion: returns whether it was resubmitted (interrupted or short); a chunk that ended (all of it
// moved, or failed) goes to `ended`.
bool Swapper::Impl::Worker::handle(io_uring_cqe* cqe, std::vector<Chunk*>& ended) {
  Chunk& chunk = *static_cast<Chunk*>(io_uring_cqe_get_data(cqe));
  const int result = cqe->res;
  if (result == -EINTR || result == -EAGAIN) {
    prepare(chunk);
    return true;
  }
  if (result < 0) {
    chunk.error = -result;
  } else if (result == 0) {
    chunk.error = chunk.write ? EIO : -1;  // a write that moves nothing; a read at the end of the file
  } else {
    chunk.transferred += static_cast<uint64_t>(result);
    chunk.remaining -= static_cast<uint64_t>(result);
    if (chunk.remaining > 0) {  // short: the rest goes again
      chunk.buffer += result;
      chunk.offset += static_cast<uint64_t>(result);
      prepare(chunk);
      return true;
    }
  }
  ended.push_back(&chunk);
  return false;
}

// Waits for at least one completion, then takes every completion that is ready.
void Swapper::Impl::Worker::reap() {
  io_uring_cqe* cqe = nullptr;
  int result;
  while ((result = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR) {
  }
  if (result < 0) {
    std::fprintf(stderr, "offload::Swapper: io_uring_wait_cqe failed: %s\n", reason_of(-result).c_str());
    std::abort();
  }
  std::vector<Chunk*> ended;
  bool resubmit = false;
  unsigned head, seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    resubmit |= handle(cqe, ended);
    ++seen;
  }
  io_uring_cq_advance(&ring_, seen);
  if (resubmit) submit();
  if (ended.empty()) return;
  bool any_request_ended = false;
  {
    std::lock_guard lock(impl_.mutex);
    for (Chunk* chunk : ended) {
      impl_.count_ended(*chunk);
      any_request_ended |= chunk->request->done;
      const bool write = chunk->write;
      if (--impl_.chunks_in_flight[write] == 0)
        impl_.busy_seconds[write] += seconds_since(impl_.busy_since[write]);
      free_slots_.push_back(static_cast<int>(chunk - slots_.data()));
      --in_flight_;
    }
  }
  if (any_request_ended) impl_.request_ended.notify_all();
}

Swapper::Ticket Swapper::Impl::post(const SwapFile& file, uint64_t offset, char* buffer, uint64_t bytes,
                                    bool write) {
  const std::string what = std::string(write ? "write" : "read") + " of " + std::to_string(bytes) +
                           " bytes at offset " + std::to_string(offset) + " of " + file.path();
  if (file.fd() < 0) throw std::invalid_argument("Swapper: " + what + ": the file is not open");
  const uint64_t end = file.direct() ? align_up(file.bytes()) : file.bytes();
  if (offset > end || bytes > end - offset) {
    throw std::invalid_argument("Swapper: " + what + " goes past the file's " + std::to_string(end) +
                                " bytes");
  }
  if (file.direct() && (offset % kDirectAlignment != 0 || bytes % kDirectAlignment != 0 ||
                        reinterpret_cast<uintptr_t>(buffer) % kDirectAlignment != 0)) {
    throw std::invalid_argument("Swapper: " + what +
                                ": O_DIRECT needs the buffer, offset and size aligned to " +
                                std::to_string(kDirectAlignment) + " bytes");
  }
  auto request = std::make_shared<Request>();
  request->path = file.path();
  request->write = write;
  request->offset = offset;
  request->bytes = bytes;
  const auto block = static_cast<uint64_t>(config.block_size);
  request->pending_chunks = (bytes + block - 1) / block;
  request->done = request->pending_chunks == 0;
  Ticket ticket;
  {
    std::lock_guard lock(mutex);
    ticket = next_ticket++;
    for (uint64_t start = 0; start < bytes; start += block) {
      Chunk chunk;
      chunk.request = request.get();
      chunk.fd = file.fd();
      chunk.write = write;
      chunk.buffer = buffer + start;
      chunk.offset = offset + start;
      chunk.remaining = std::min(block, bytes - start);
      queue.push_back(chunk);
    }
    requests.emplace(ticket, std::move(request));
  }
  work_ready.notify_all();
  return ticket;
}

std::string Swapper::Impl::finish(std::unique_lock<std::mutex>& lock, Ticket ticket,
                                  std::shared_ptr<Request> request) {
  request_ended.wait(lock, [&] { return request->done; });
  if (requests.erase(ticket) == 0) return "";
  return std::move(request->error);
}

namespace {

void check_config(const AioConfig& config) {
  const int64_t block = config.block_size;
  if (block < static_cast<int64_t>(kDirectAlignment) || block > (int64_t{1} << 30) ||
      block % static_cast<int64_t>(kDirectAlignment) != 0) {
    throw UsageError("aio.block_size is " + std::to_string(block) + ": it must be a multiple of " +
                     std::to_string(kDirectAlignment) + " bytes up to 1 GiB; set it to e.g. 1048576");
  }
  if (config.queue_depth < 1 || config.queue_depth > 4096) {
    throw UsageError("aio.queue_depth is " + std::to_string(config.queue_depth) +
                     ": it must be between 1 and 4096; set it to e.g. 8");
  }
  if (config.thread_count < 1 || config.thread_count > 256) {
    throw UsageError("aio.thread_count is " + std::to_string(config.thread_count) +
                     ": it must be between 1 and 256; set it to e.g. 1");
  }
}

}  // namespace

Swapper::Swapper(const AioConfig& config) : config_(config), impl_(std::make_unique<Impl>()) {
  check_config(config);
  impl_->config = config;
  for (int i = 0; i < config.thread_count; ++i)
    impl_->workers.push_back(std::make_unique<Impl::Worker>(*impl_));
  for (auto& worker : impl_->workers) worker->start();
}

Swapper::~Swapper() {
  try {
    wait_all();
  } catch (const SwapError&) {
    // Nobody is left to tell; the caller that cared waited for its tickets.
  }
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->work_ready.notify_all();
  for (auto& worker : impl_->workers) worker->join();
}

Swapper::Ticket Swapper::read(const SwapFile& file, uint64_t offset, void* buffer, uint64_t bytes) {
  return impl_->post(file, offset, static_cast<char*>(buffer), bytes, false);
}

Swapper::Ticket Swapper::write(const SwapFile& file, uint64_t offset, const void* buffer, uint64_t bytes) {
  // The kernel only reads the buffer of a write; the chunk keeps one pointer type for both directions.
  return impl_->post(file, offset, static_cast<char*>(const_cast<void*>(buffer)), bytes, true);
}

void Swapper::wait(Ticket ticket) {
  const auto start = Clock::now();
  std::unique_lock lock(impl_->mutex);
  const auto found = impl_->requests.find(ticket);
  if (found == impl_->requests.end()) {
    if (ticket == 0 || ticket >= impl_->next_ticket) {
      throw std::invalid_argument("Swapper::wait: ticket " + std::to_string(ticket) + " was never posted");
    }
    return;  // waited for before
  }
  const std::string error = impl_->finish(lock, ticket, found->second);
  impl_->wait_seconds += seconds_since(start);
  if (!error.empty()) throw SwapError(error);
}

// Waits for every request posted so far (even after one failed, so that no buffer is still in use), then
// throws the first failure.
void Swapper::wait_all() {
  const auto start = Clock::now();
  std::unique_lock lock(impl_->mutex);
  std::vector<Ticket> tickets;
  for (const auto& [ticket, request] : impl_->requests) tickets.push_back(ticket);
  std::string first_error;
  for (Ticket ticket : tickets) {
    const auto found = impl_->requests.find(ticket);
    if (found == impl_->requests.end()) continue;  // another thread waited for it meanwhile
    std::string error = impl_->finish(lock, ticket, found->second);
    if (first_error.empty()) first_error = std::move(error);
  }
  impl_->wait_seconds += seconds_since(start);
  if (!first_error.empty()) throw SwapError(first_error);
}

Swapper::Stats Swapper::stats() const {
  std::lock_guard lock(impl_->mutex);
  Stats stats;
  stats.bytes_read = impl_->bytes_moved[0];
  stats.bytes_written = impl_->bytes_moved[1];
  double busy[2] = {impl_->busy_seconds[0], impl_->busy_seconds[1]};
  for (int write = 0; write < 2; ++write) {
    if (impl_->chunks_in_flight[write] > 0) busy[write] += seconds_since(impl_->busy_since[write]);
  }
  stats.read_busy_seconds = busy[0];
  stats.write_busy_seconds = busy[1];
  stats.wait_seconds = impl_->wait_seconds;
  return stats;
}

}  // namespace gpt::offload
