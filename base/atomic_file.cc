// write_file_atomically: temporary name, fsync, rename; see atomic_file.h.
#include "base/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpt {

std::string write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) return std::strerror(errno);
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;  // the rename must not land before the data does
  int error = ok ? 0 : errno;
  ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(temp.c_str(), path.c_str()) == 0) return "";
  if (error == 0) error = errno;
  std::remove(temp.c_str());
  return std::strerror(error);
}

}  // namespace gpt
