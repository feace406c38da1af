// How a doctest test says that it could not run a check on this machine (no GPU, no root to mount a tmpfs, a
// CPU feature the build lacks): gpt::testing::skipped("what: why") prints the line "SKIPPED: what: why".
// main() (tests/doctest_main.cc) counts them: a run that skipped a check and ran no assertion at all ends
// with the line "SKIPPED (all checks): ...", and scripts/test counts that target as skipped, not passed; a
// run that checked something besides stays passed, and scripts/test lists its SKIPPED: lines.
#pragma once

namespace gpt::testing {

// printf-style; the line ends with a newline.
void skipped(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace gpt::testing
