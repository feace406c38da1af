// allocate_zeroed_host: small and large blocks come zero-filled and 64-byte aligned, and free_host takes them
// back; a large block starts on a 2 MiB boundary, its whole 2 MiB stretches carry the huge-page advice (the
// "hg" flag of /proc/self/smaps) and its tail does not; Buffers and arenas of either size hold zeros.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "tensor/arena.h"
#include "tensor/host_pages.h"
#include "tensor/tensor.h"

namespace {

bool all_zero(const void* block, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(block);
  return std::all_of(p, p + bytes, [](unsigned char b) { return b == 0; });
}

// The VmFlags line of the mapping in /proc/self/smaps that holds `address` ("" when none does).
std::string vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  return (flags + " ").find(" " + flag + " ") != std::string::npos;
}

}  // namespace

TEST_CASE("small and large host blocks come zero-filled, aligned, and go back") {
  for (size_t bytes : {size_t(64), size_t(4000), gpt::kHugePageBytes - 64, gpt::kHugePageBytes,
                       3 * gpt::kHugePageBytes + 4096 + 64}) {
    CAPTURE(bytes);
    void* block = gpt::allocate_zeroed_host(bytes);
    REQUIRE(block != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(block) % 64 == 0);
    CHECK(all_zero(block, bytes));
    std::fill_n(static_cast<unsigned char*>(block), bytes, 0xab);  // every byte is writable
    gpt::free_host(block, bytes);
  }
  gpt::free_host(nullptr, 123);  // ignored
}

TEST_CASE("a large block starts on a 2 MiB boundary with huge-page advice on its whole 2 MiB stretches") {
  const size_t bytes = 3 * gpt::kHugePageBytes + 12345;
  auto* block = static_cast<unsigned char*>(gpt::allocate_zeroed_host(bytes));
  CHECK(reinterpret_cast<uintptr_t>(block) % gpt::kHugePageBytes == 0);
  const std::string head = vm_flags_at(block), tail = vm_flags_at(block + bytes - 1);
  CAPTURE(head);
  CAPTURE(tail);
  REQUIRE_FALSE(head.empty());
  REQUIRE_FALSE(tail.empty());
  CHECK(has_flag(head, "hg"));
  CHECK_FALSE(has_flag(tail, "hg"));  // the last partial 2 MiB keeps small pages
  gpt::free_host(block, bytes);
  CHECK(vm_flags_at(block).empty());  // unmapped
}

TEST_CASE("Buffers and arena blocks of every size hold zeros") {
  for (size_t bytes : {size_t(1), size_t(1000), 5 * gpt::kHugePageBytes + 7}) {
    CAPTURE(bytes);
    const gpt::Buffer buffer(bytes);
    CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % 64 == 0);
    CHECK(all_zero(buffer.data(), bytes));
    gpt::Arena arena("host");
    void* block = arena.allocate("block", "test", bytes);
    CHECK(all_zero(block, bytes));
    std::fill_n(static_cast<unsigned char*>(block), bytes, 0xcd);
    arena.release(block);
    void* again = arena.allocate("again", "test", bytes);  // a kept block comes back zero-filled too
    CHECK(all_zero(again, bytes));
    arena.release(again);
  }
}
