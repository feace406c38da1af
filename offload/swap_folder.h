// One rank's swap folder, nvme_path/<run id>/rank<r>/: where that rank's swap files live while it runs.
//
// Opening it checks nvme_path (missing, not a directory, not writable, too small: one line with the fix),
// removes a stale copy that a killed run left behind (its contents are never reused as state; a checkpoint
// is), refuses a folder that another live run holds (an flock on a lock file inside it: the kernel drops the
// lock when its process dies, so a held lock means a live owner), and finds out whether the filesystem takes
// O_DIRECT. Destroying it removes the rank folder, and the run folder once no rank is left in it, so that a
// clean exit, or an exception that unwinds through its owner, leaves nothing behind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/swapper.h"

namespace gpt::offload {

class SwapFolder {
 public:
  // `bytes_needed`: what this rank's swap files will take (checked against the free space); `key`: the config
  // key that named nvme_path, for the messages. Throws UsageError.
  SwapFolder(const std::string& nvme_path, const std::string& run_id, int rank, uint64_t bytes_needed,
             const std::string& key);
  ~SwapFolder();
  SwapFolder(const SwapFolder&) = delete;
  SwapFolder& operator=(const SwapFolder&) = delete;

  const std::string& path() const { return path_; }
  // Whether swap files here use O_DIRECT (false: the filesystem refused it and I/O is buffered).
  bool direct() const { return direct_; }
  // Lines for the banner: a stale folder removed, a fallback to buffered I/O.
  const std::vector<std::string>& notes() const { return notes_; }

  // A swap file `name` of `bytes` in this folder (preallocated; removed when the pointer is destroyed, which
  // must happen before the folder is).
  std::unique_ptr<SwapFile> create_file(const std::string& name, uint64_t bytes) const;

  // The lock file's name inside the rank folder.
  static constexpr const char* kLockName = ".lock";

 private:
  void remove_stale_folder(const std::string& key);
  void create_and_lock(const std::string& key);
  void remove_folders() noexcept;

  std::string run_path_, path_;
  bool direct_ = false;
  int lock_fd_ = -1;
  std::vector<std::string> notes_;
};

}  // namespace gpt::offload
