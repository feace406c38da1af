// The body of every main(): one place that turns an exception into the message and the exit code a user
// sees. A UsageError (or a room's error derived from it) prints "program: message" on stderr and gives 2;
// any other exception prints "program: message" and gives 1. MPI programs use comm::run_mpi_main
// (comm/mpi_main.h), which adds the session and keeps every rank's exit code the same.
//
//   int main(int argc, char** argv) {
//     return gpt::run_main("gpt_tokenize", [&] { return run(argc, argv); });
//   }
#pragma once

#include <functional>

#include "base/user_error.h"

namespace gpt {

int run_main(const char* program, const std::function<int()>& body);

// Call inside a catch block: prints the exception in flight as above and returns its exit code (2 or 1).
int report_exception(const char* program) noexcept;

}  // namespace gpt
