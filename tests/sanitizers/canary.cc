// Planted bugs that the sanitizer builds must report, so a test run knows its sanitizers are on:
//   canary heap_overflow    writes one int past a heap array (AddressSanitizer: heap-buffer-overflow)
//   canary signed_overflow  adds past INT_MAX (UndefinedBehaviorSanitizer: signed integer overflow)
//   canary data_race        two threads write one int with no synchronization (ThreadSanitizer: data race)
// Test-only: built and run by canary_test.sh in --config=asan and --config=tsan alone.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

// The sizes and values come from argc so that the compiler cannot see the bug and remove it.
int heap_overflow(int n) {
  int* values = new int[n];
  values[n] = 1;  // one past the end
  const int read = values[n];
  delete[] values;
  return read;
}

int signed_overflow(int n) {
  int big = INT_MAX - 1;
  big += n + 1;  // INT_MAX + 1
  return big;
}

int data_race(int n) {
  int shared = 0;
  std::thread a([&] { shared += n; });
  std::thread b([&] { shared += n; });
  a.join();
  b.join();
  return shared;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: canary heap_overflow|signed_overflow|data_race\n");
    return 2;
  }
  const int n = argc - 1;  // 1, unknown to the optimizer
  int result = 0;
  if (std::strcmp(argv[1], "heap_overflow") == 0) {
    result = heap_overflow(n);
  } else if (std::strcmp(argv[1], "signed_overflow") == 0) {
    result = signed_overflow(n);
  } else if (std::strcmp(argv[1], "data_race") == 0) {
    result = data_race(n);
  } else {
    std::fprintf(stderr, "canary: unknown bug '%s'\n", argv[1]);
    return 2;
  }
  std::printf("canary %s ran without a report (result %d)\n", argv[1], result);
  return 0;
}
