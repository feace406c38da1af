// Zero-filled, 64-byte aligned host memory for the arenas' blocks and Buffers, with the large blocks on
// transparent huge pages.
//
// Why. A training step frees and allocates the same large buffers every step (gradient buckets, qgZ's stages,
// gathered layers), and some of them are always fresh memory: the kernel must map and clear a page on the
// first touch of every 4 KiB. Measured on the 2-core VMs we build on, a fresh 64 MiB block took about 250 ms
// to fault in 4 KiB pages and about 6 ms in 2 MiB ones (a fault costs some 15 us there, in a nested page
// table); that was most of the "fresh memory" share of a ZeRO++ step's CPU time (bench/cpu_profile.sh).
//
// How. A block of at least kHugePageBytes is mapped straight from the kernel (anonymous pages come zeroed,
// so no memset), placed on a 2 MiB boundary, and its whole 2 MiB stretches are marked MADV_HUGEPAGE; the
// tail under 2 MiB keeps 4 KiB pages, so no block faults in more than it has. Where transparent huge pages
// are off ("never") the advice changes nothing. Smaller blocks come from aligned_alloc and a memset, as
// before. The bytes a caller sees are the same either way: zeros.
#pragma once

#include <cstddef>

namespace gpt {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

// A zero-filled block of `bytes` (> 0), 64-byte aligned. Throws std::bad_alloc when memory is refused.
void* allocate_zeroed_host(size_t bytes);
// Gives back a block from allocate_zeroed_host with the same `bytes`; null is ignored.
void free_host(void* block, size_t bytes);

}  // namespace gpt
