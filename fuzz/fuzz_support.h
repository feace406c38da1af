// What the fuzz targets share: a scratch file for readers that take a path, and the check that a rejected
// input was rejected the way users are promised (a UsageError whose message is one line).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/user_error.h"

namespace gpt::fuzz {

// An in-memory file (memfd) reachable by path as /proc/self/fd/N: each input is written here whole and the
// reader opens it by name like any file, without touching a disk.
class ScratchFile {
 public:
  ScratchFile() : fd_(::memfd_create("gpt_fuzz_input", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~ScratchFile() { ::close(fd_); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with the input.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != ssize_t(size))) {
      std::perror("writing the scratch file");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// A rejected input must be rejected with one line: the users' error messages are never multi-line.
inline void expect_one_line(const UsageError& e) {
  const std::string message = e.what();
  if (message.empty() || message.find('\n') != std::string::npos) {
    std::fprintf(stderr, "error message is not one line: [%s]\n", message.c_str());
    std::abort();
  }
}

}  // namespace gpt::fuzz
