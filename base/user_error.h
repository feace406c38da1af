// The one type for a mistake the user can fix (a bad flag, file, setting or topology): what() is one complete
// line naming the problem, where, and the fix. Every main catches it once (base/main.h), prints
// "program: message" and exits with code 2 on every rank. Rooms derive their own names from it
// (data::DataError, comm::TopologyError) so that one catch handles them all.
#pragma once

#include <stdexcept>

namespace gpt {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace gpt
