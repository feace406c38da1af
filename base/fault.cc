// GPT_FAULT, the tests' fault hook; see fault.h.
#include "base/fault.h"

#include <cstdlib>

#include "base/user_error.h"

namespace gpt {
namespace {

struct Fault {
  std::string kind;  // "", "hang", "save_fail" or "crash_after"
  std::string argument;
};

Fault parse_fault() {
  if (const char* legacy = std::getenv("GPT_CHECKPOINT_FAULT"); legacy && *legacy)
    return {"crash_after", legacy};
  const char* spec = std::getenv("GPT_FAULT");
  if (!spec || !*spec) return {};
  const std::string text = spec;
  const size_t colon = text.find(':');
  Fault f{text.substr(0, colon), colon == std::string::npos ? "" : text.substr(colon + 1)};
  const bool known = f.kind == "save_fail" || f.kind == "crash_after" ||
                     (f.kind == "hang" && f.argument.find(':') != std::string::npos);
  if (!known || f.argument.empty()) {
    throw UsageError("GPT_FAULT=" + text +
                     " is not a fault this build injects; use hang:STEP:RANK, save_fail:RANK or "
                     "crash_after:POINT, or unset it");
  }
  return f;
}

const Fault& fault() {
  static const Fault f = parse_fault();
  return f;
}

}  // namespace

bool fault_hangs(long long step, int rank) {
  return fault().kind == "hang" && fault().argument == std::to_string(step) + ":" + std::to_string(rank);
}

bool fault_save_fails(int rank) {
  return fault().kind == "save_fail" && fault().argument == std::to_string(rank);
}

bool fault_crash_after(const std::string& point) {
  return fault().kind == "crash_after" && fault().argument == point;
}

}  // namespace gpt
