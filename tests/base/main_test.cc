// The main() wrapper: the exit code of each kind of ending, and other rooms' errors taken as user errors.
#include "base/main.h"

#include <doctest/doctest.h>

#include <stdexcept>

namespace {

struct OtherRoomError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

TEST_CASE("exit codes: the body's own, 2 for a user error, 1 for anything else") {
  CHECK(gpt::run_main("prog", [] { return 0; }) == 0);
  CHECK(gpt::run_main("prog", [] { return 3; }) == 3);
  CHECK(gpt::run_main("prog", []() -> int { throw gpt::UsageError("--x is bad; use --y"); }) == 2);
  CHECK(gpt::run_main("prog", []() -> int { throw std::logic_error("a bug"); }) == 1);
  CHECK(gpt::run_main("prog", []() -> int { throw 42; }) == 1);
}

TEST_CASE("treat_as_usage_errors turns the named types into UsageError with the same message") {
  const auto body = []() -> int { throw OtherRoomError("model.bin: truncated"); };
  CHECK(gpt::run_main("prog", body) == 1);
  CHECK(gpt::run_main(
            "prog", [&] { return gpt::treat_as_usage_errors<std::logic_error, OtherRoomError>(body); }) == 2);
  try {
    gpt::treat_as_usage_errors<OtherRoomError>(body);
    FAIL("no exception");
  } catch (const gpt::UsageError& e) {
    CHECK(std::string(e.what()) == "model.bin: truncated");
  }
  CHECK(gpt::treat_as_usage_errors<OtherRoomError>([] { return 7; }) == 7);
}
