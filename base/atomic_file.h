// Writing a file that matters whole or not at all: the bytes go to a temporary name beside the target, are
// flushed to disk, and are then renamed over it, so a reader sees the old file or the complete new one.
#pragma once

#include <string>
#include <string_view>

namespace gpt {

// Writes `bytes` to path that way. Returns "" on success, else the reason (strerror's text), with the
// temporary file removed; the caller names the file and the fix in its own error.
std::string write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace gpt
