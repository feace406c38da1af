// One rank's swap folder (offload/swap_folder.h): check, clear a stale copy, lock, probe O_DIRECT, remove.
#include "offload/swap_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "base/user_error.h"

namespace gpt::offload {
namespace fs = std::filesystem;

namespace {

std::string busy_message(const std::string& folder, const std::string& key) {
  return "another run is using the swap folder " + folder + " (it holds " + folder + "/" +
         SwapFolder::kLockName + "): give this run a different " + key +
         ", or a different --save (the run id names the folder)";
}

// Opens (or creates) the lock file and takes its lock without waiting. Returns the descriptor, or -1 with
// errno EWOULDBLOCK when a live process holds it.
int lock_file(const std::string& path, bool create) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

}  // namespace

SwapFolder::SwapFolder(const std::string& nvme_path, const std::string& run_id, int rank,
                       uint64_t bytes_needed, const std::string& key) {
  // Missing, not a directory, not writable: before anything is touched.
  if (std::string problem = check_swap_folder(nvme_path, 0, key); !problem.empty()) throw UsageError(problem);
  run_path_ = (fs::path(nvme_path) / run_id).string();
  path_ = (fs::path(run_path_) / ("rank" + std::to_string(rank))).string();
  remove_stale_folder(key);
  try {
    // The free space is checked once a stale copy no longer takes any of it.
    if (std::string problem = check_swap_folder(nvme_path, bytes_needed, key); !problem.empty()) {
      throw UsageError(problem);
    }
    create_and_lock(key);
  } catch (...) {
    if (lock_fd_ >= 0) remove_folders();  // ours: created and locked
    std::error_code ignored;
    fs::remove(run_path_, ignored);  // only when empty
    throw;
  }
  direct_ = supports_direct_io(path_);
  if (!direct_) {
    notes_.push_back("the filesystem at " + path_ + " does not support O_DIRECT; the swapper falls back to " +
                     "buffered I/O");
  }
}

SwapFolder::~SwapFolder() {
  remove_folders();
}

void SwapFolder::remove_stale_folder(const std::string& key) {
  std::error_code error;
  if (!fs::exists(path_, error)) return;
  const int fd = lock_file(path_ + "/" + kLockName, false);
  if (fd < 0 && errno == EWOULDBLOCK) throw UsageError(busy_message(path_, key));
  fs::remove_all(path_, error);
  if (fd >= 0) close(fd);
  if (error) {
    throw UsageError("cannot remove the stale swap folder " + path_ + " (" + error.message() +
                     "): remove it by hand or set " + key + " to another folder");
  }
  notes_.push_back("removed a stale swap folder " + path_ +
                   " left by a run that did not exit cleanly; its contents are never reused as state");
}

void SwapFolder::create_and_lock(const std::string& key) {
  std::error_code error;
  bool created = false;
  // Another rank of the run may remove the (momentarily empty) run folder between our creating it and our
  // rank folder inside it: try again then.
  for (int attempt = 0; attempt < 100; ++attempt) {
    error.clear();
    created = fs::create_directories(path_, error);
    if (error != std::errc::no_such_file_or_directory) break;
  }
  if (error) {
    throw UsageError("cannot create the swap folder " + path_ + " (" + error.message() +
                     "): check the permissions of " + run_path_);
  }
  lock_fd_ = lock_file(path_ + "/" + kLockName, true);
  if (lock_fd_ < 0) {
    const int lock_error = errno;
    // EWOULDBLOCK: another run created the same folder between our check and now, and it is theirs.
    if (lock_error == EWOULDBLOCK) throw UsageError(busy_message(path_, key));
    if (created) fs::remove_all(path_, error);
    throw UsageError("cannot create the lock file in " + path_ + ": " +
                     std::generic_category().message(lock_error));
  }
}

void SwapFolder::remove_folders() noexcept {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
  fs::remove(run_path_, ignored);  // fails, as it should, while another rank's folder is in it
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
}

std::unique_ptr<SwapFile> SwapFolder::create_file(const std::string& name, uint64_t bytes) const {
  return std::make_unique<SwapFile>((fs::path(path_) / name).string(), bytes, direct_);
}

}  // namespace gpt::offload
