// run_main and report_exception; see main.h.
#include "base/main.h"

#include <cstdio>
#include <exception>

namespace gpt {

int report_exception(const char* program) noexcept {
  try {
    throw;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: an exception of unknown type\n", program);
  }
  return 1;
}

int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (...) {
    return report_exception(program);
  }
}

}  // namespace gpt
