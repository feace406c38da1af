// The one main() of every doctest test binary, and the count of checks skipped (tests/skip.h).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "tests/skip.h"

namespace {

std::mutex skips_mutex;
int skips = 0;
std::string first_skip;

// Ends a run that skipped a check and ran no assertion with the line scripts/test counts as a skipped target.
struct SkipListener : doctest::IReporter {
  explicit SkipListener(const doctest::ContextOptions&) {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    std::lock_guard<std::mutex> lock(skips_mutex);
    if (skips == 0 || stats.numAsserts != 0 || stats.numTestCasesFailed != 0) return;
    std::printf("SKIPPED (all checks): no assertion ran; %d SKIPPED: line%s, the first: %s\n", skips,
                skips == 1 ? "" : "s", first_skip.c_str());
    std::fflush(stdout);
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("skipped", 1, SkipListener);

}  // namespace

namespace gpt::testing {

void skipped(const char* format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(skips_mutex);
  if (skips++ == 0) first_skip = line;
  std::printf("SKIPPED: %s\n", line);
  std::fflush(stdout);
}

}  // namespace gpt::testing
