// The main() wrapper: the exit code of each kind of ending.
#include "base/main.h"

#include <doctest/doctest.h>

#include <stdexcept>

TEST_CASE("exit codes: the body's own, 2 for a user error, 1 for anything else") {
  CHECK(gpt::run_main("prog", [] { return 0; }) == 0);
  CHECK(gpt::run_main("prog", [] { return 3; }) == 3);
  CHECK(gpt::run_main("prog", []() -> int { throw gpt::UsageError("--x is bad; use --y"); }) == 2);
  CHECK(gpt::run_main("prog", []() -> int { throw std::logic_error("a bug"); }) == 1);
  CHECK(gpt::run_main("prog", []() -> int { throw 42; }) == 1);
}
