// KeptBlockSource: after the first step, a step that frees and allocates the same buffers acquires nothing
// from the source beneath; a kept block up to 1.5 times a request serves it and is kept again at its own
// size; kept blocks stay within 5% above the peak of blocks in use, the smallest freed first; a refused
// allocation is retried after the kept blocks are freed; retire and reuse bracket every kept block's second
// life; a block allocated for overwrite is made ready without the zero-fill, accounted like any other.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "tensor/arena.h"
#include "tensor/kept_block_source.h"

namespace {

// Host blocks that count what is asked of them; refuses acquisitions beyond `limit` bytes held.
struct CountingSource : gpt::BlockSource {
  int acquired = 0, released = 0, retired = 0, reused = 0;
  size_t held = 0, limit = SIZE_MAX;
  void* acquire(size_t bytes) override {
    if (held + bytes > limit) throw std::bad_alloc();
    ++acquired;
    held += bytes;
    void* block = std::aligned_alloc(64, bytes);
    std::memset(block, 0, bytes);
    return block;
  }
  void release(void* block, size_t bytes) override {
    ++released;
    held -= bytes;
    std::free(block);
  }
  void retire(void*, size_t) override { ++retired; }
  void reuse(void* block, size_t bytes) override {
    ++reused;
    gpt::BlockSource::reuse(block, bytes);
  }
  // As a host source would: the block as it was (the default would zero-fill it through reuse).
  void reuse_for_overwrite(void*, size_t) override { ++reused_for_overwrite; }
  int reused_for_overwrite = 0;
  gpt::Device device() const override { return gpt::Device::kCPU; }
};

constexpr size_t kMiB = size_t(1) << 20;

// One step's buffers: two gradient buckets, a wire buffer and a small scratch, dirtied and freed in another
// order than allocated.
void step(gpt::Arena& arena) {
  std::vector<void*> blocks = {
      arena.allocate("bucket 0", "gradients", 4 * kMiB), arena.allocate("bucket 1", "gradients", 4 * kMiB),
      arena.allocate("wire", "communication", 2 * kMiB), arena.allocate("scratch", "communication", 100)};
  for (void* b : blocks) {
    const auto* bytes = static_cast<const uint8_t*>(b);
    CHECK(std::all_of(bytes, bytes + 100, [](uint8_t x) { return x == 0; }));  // zero-filled, kept or not
    std::memset(b, 0x5a, 100);
  }
  for (int i : {2, 0, 3, 1}) arena.release(blocks[i]);
}

}  // namespace

TEST_CASE("after the first step, the same buffers come from kept blocks: nothing is acquired") {
  CountingSource inner;
  gpt::KeptBlockSource kept(inner, 128 << 10);
  {
    gpt::Arena arena("pinned", gpt::Arena::kUnlimited, &kept);
    step(arena);
    const int after_first = inner.acquired;
    CHECK(after_first == 4);
    for (int i = 0; i < 5; ++i) step(arena);
    CHECK(inner.acquired == after_first + 5);  // the 100-byte scratch alone, every step
    CHECK(inner.retired == 6 * 3);
    CHECK(inner.reused == 5 * 3);
    CHECK(kept.kept_bytes() == 10 * kMiB);
  }
  kept.free_all();
  CHECK(inner.held == 0);
  CHECK(inner.acquired == inner.released);
}

TEST_CASE(
    "kept at every size (as the CUDA backend's pinned wire memory), nothing at all after the first step") {
  CountingSource inner;
  gpt::KeptBlockSource kept(inner, 0);
  gpt::Arena arena("pinned", gpt::Arena::kUnlimited, &kept);
  step(arena);
  for (int i = 0; i < 5; ++i) step(arena);
  CHECK(inner.acquired == 4);
  CHECK(inner.reused == 5 * 4);
}

TEST_CASE("a kept block up to 1.5 times the request serves it, and is kept again at its own size") {
  CountingSource inner;
  gpt::KeptBlockSource kept(inner, 128 << 10);
  gpt::Arena arena("pinned", gpt::Arena::kUnlimited, &kept);
  void* a = arena.allocate("a", "buffers", 4 * kMiB);
  std::memset(a, 0x5a, 4 * kMiB);
  arena.release(a);
  void* b = arena.allocate("b", "buffers", 3 * kMiB);  // 4 MiB <= 1.5 x 3 MiB
  CHECK(b == a);
  CHECK(inner.acquired == 1);
  CHECK(inner.reused == 1);
  const auto* bytes = static_cast<const uint8_t*>(b);
  CHECK(std::all_of(bytes, bytes + 3 * kMiB, [](uint8_t x) { return x == 0; }));
  arena.release(b);
  CHECK(kept.kept_bytes() == 4 * kMiB);
  arena.release(arena.allocate("c", "buffers", 4 * kMiB));  // the same block, at its own size again
  CHECK(inner.acquired == 1);
  kept.free_all();
  CHECK(inner.held == 0);
}

TEST_CASE("kept blocks stay within 5% above the peak of blocks in use, the smallest freed first") {
  CountingSource inner;
  gpt::KeptBlockSource kept(inner, 128 << 10);
  gpt::Arena arena("pinned", gpt::Arena::kUnlimited, &kept);
  arena.release(arena.allocate("a", "buffers", 4 * kMiB));
  // Too small for the kept block (4 > 1.5 x 1) and 5 MiB in all would pass 1.05 x the 4 MiB peak.
  void* b = arena.allocate("b", "buffers", kMiB);
  CHECK(kept.kept_bytes() == 0);
  CHECK(inner.held == kMiB);
  arena.release(b);
  kept.free_all();

  void* c = arena.allocate("c", "buffers", 8 * kMiB);
  void* d = arena.allocate("d", "buffers", 12 * kMiB);
  arena.release(c);
  arena.release(d);                                    // a peak of 20 MiB, all of it kept
  void* e = arena.allocate("e", "buffers", kMiB / 2);  // 20.5 MiB <= 21: nothing freed
  CHECK(kept.kept_bytes() == 20 * kMiB);
  void* f = arena.allocate("f", "buffers", kMiB);  // 21.5 MiB > 21: the 8 MiB block goes, not the 12
  CHECK(kept.kept_bytes() == 12 * kMiB);
  arena.release(e);
  arena.release(f);
}

TEST_CASE("an allocation the source refuses is retried once the kept blocks are freed") {
  CountingSource inner;
  gpt::KeptBlockSource kept(inner, 128 << 10);
  gpt::Arena arena("pinned", gpt::Arena::kUnlimited, &kept);
  void* a = arena.allocate("a", "buffers", 4 * kMiB);
  void* b = arena.allocate("b", "buffers", 4 * kMiB);
  void* c = arena.allocate("c", "buffers", 4 * kMiB);
  arena.release(a);
  arena.release(b);  // 8 MiB kept under a peak of 12
  // Someone else took memory meanwhile: the source now refuses anything beyond 8 MiB, and it holds 12 (the
  // half-MiB request fits within 5% above the peak, so the keeping alone would free nothing).
  inner.limit = 8 * kMiB;
  void* d = arena.allocate("d", "buffers", kMiB / 2);
  CHECK(kept.kept_bytes() == 0);  // freed for the retry
  CHECK(inner.held == 4 * kMiB + kMiB / 2);
  // Refused even with nothing kept: the refusal reaches the caller, and nothing is counted as used.
  CHECK_THROWS_AS(arena.allocate("huge", "buffers", 7 * kMiB), std::bad_alloc);
  CHECK_NOTHROW(arena.release(arena.allocate("after", "buffers", 3 * kMiB)));
  arena.release(c);
  arena.release(d);
}

TEST_CASE(
    "allocate_for_overwrite: a kept block keeps its old bytes (no zero-fill); accounting is unchanged") {
  CountingSource inner;
  gpt::KeptBlockSource kept(inner, 128 << 10);
  gpt::Arena arena("host", gpt::Arena::kUnlimited, &kept);
  void* first = arena.allocate_for_overwrite("received", "communication", kMiB);
  CHECK(inner.acquired == 1);  // a fresh block: from the source beneath, zero-filled there
  std::memset(first, 0x5a, kMiB);
  arena.release(first);
  void* again = arena.allocate_for_overwrite("received", "communication", kMiB);
  CHECK(again == first);
  CHECK(inner.acquired == 1);
  CHECK(inner.reused_for_overwrite == 1);
  CHECK(inner.reused == 0);
  CHECK(static_cast<const uint8_t*>(again)[kMiB - 1] == 0x5a);
  CHECK(arena.current_bytes() == kMiB);
  CHECK(arena.usage_by_category().at(0).current_bytes == kMiB);
  arena.release(again);
  void* zeroed = arena.allocate("bucket", "gradients", kMiB);  // the same kept block, zero-filled
  CHECK(zeroed == first);
  CHECK(inner.reused == 1);
  CHECK(static_cast<const uint8_t*>(zeroed)[kMiB - 1] == 0);
  arena.release(zeroed);
}

TEST_CASE("a source that does not say otherwise zero-fills a block allocated for overwrite as well") {
  struct ZeroingOnly : gpt::BlockSource {  // reuse alone, as the device sources define it
    void* acquire(size_t bytes) override { return std::aligned_alloc(64, bytes); }
    void release(void* block, size_t) override { std::free(block); }
    gpt::Device device() const override { return gpt::Device::kCPU; }
  } inner;
  gpt::KeptBlockSource kept(inner, 128 << 10);
  gpt::Arena arena("device", gpt::Arena::kUnlimited, &kept);
  void* block = arena.allocate("bucket", "gradients", kMiB);
  std::memset(block, 0x5a, kMiB);
  arena.release(block);
  void* again = arena.allocate_for_overwrite("received", "communication", kMiB);
  CHECK(again == block);
  CHECK(static_cast<const uint8_t*>(again)[0] == 0);  // the default reuse_for_overwrite is reuse
  arena.release(again);
  kept.free_all();
}
