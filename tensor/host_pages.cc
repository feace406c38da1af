// Zero-filled host blocks, the large ones on transparent huge pages (see host_pages.h).
#include "tensor/host_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace gpt {
namespace {

size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

size_t page_bytes() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

// A mapping of `length` bytes (a multiple of the page size) that starts on a 2 MiB boundary: map 2 MiB more
// than needed, then unmap the slack on either side.
char* map_on_huge_boundary(size_t length) {
  const size_t span = length + kHugePageBytes;
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  char* first = static_cast<char*>(mapped);
  char* start = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(first), kHugePageBytes));
  if (start > first) munmap(first, size_t(start - first));
  char* end = start + length;
  if (first + span > end) munmap(end, size_t(first + span - end));
  return start;
}

}  // namespace

void* allocate_zeroed_host(size_t bytes) {
  if (bytes < kHugePageBytes) {
    const size_t rounded = round_up(bytes, 64);  // aligned_alloc takes a multiple of the alignment
    void* block = std::aligned_alloc(64, rounded);
    if (!block) throw std::bad_alloc();
    std::memset(block, 0, rounded);
    return block;
  }
  char* block = map_on_huge_boundary(round_up(bytes, page_bytes()));
  // Advice only: where the kernel has no huge page at hand, or they are off, the block gets 4 KiB pages.
  madvise(block, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return block;
}

void free_host(void* block, size_t bytes) {
  if (!block) return;
  if (bytes < kHugePageBytes) {
    std::free(block);
    return;
  }
  munmap(block, round_up(bytes, page_bytes()));
}

}  // namespace gpt
