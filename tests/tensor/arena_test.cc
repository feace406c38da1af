// The arena: alignment and zero-fill, current/peak accounting overall and per category, out-of-order
// release, refusal of foreign pointers, the capacity budget and its message, a custom block source, parts of
// categories, and the counting block source of the dry run.
#include "tensor/arena.h"
#include "tensor/counting_block_source.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

TEST_CASE("blocks are aligned, zeroed, and accounted when allocated and released in any order") {
  gpt::Arena arena("host");
  void* master = arena.allocate("master.shard", "master", 1000);  // rounds to 1024
  void* moments = arena.allocate("adam.m", "moments", 4096);
  void* grads = arena.allocate("grad.shard", "gradients", 64);
  for (void* p : {master, moments, grads}) CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  const auto* bytes = static_cast<const unsigned char*>(master);
  int nonzero = 0;
  for (int i = 0; i < 1000; ++i) nonzero += bytes[i] != 0;
  CHECK(nonzero == 0);
  CHECK(arena.current_bytes() == 1024 + 4096 + 64);
  CHECK(arena.live_blocks() == 3);

  arena.release(moments);  // out of order: a bump arena could not do this
  CHECK(arena.current_bytes() == 1024 + 64);
  CHECK(arena.peak_bytes() == 1024 + 4096 + 64);
  void* again = arena.allocate("adam.v", "moments", 128);
  CHECK(arena.peak_bytes() == 1024 + 4096 + 64);

  auto usage = arena.usage_by_category();
  REQUIRE(usage.size() == 3);
  CHECK(usage[0].category == "master");
  CHECK(usage[1].category == "moments");
  CHECK(usage[1].current_bytes == 128);
  CHECK(usage[1].peak_bytes == 4096);
  CHECK(usage[1].blocks == 1);

  auto live = arena.live();
  REQUIRE(live.size() == 3);
  CHECK(live[0].name == "master.shard");
  CHECK(live[2].name == "adam.v");
  CHECK(live[2].data == again);

  const std::string table = arena.report();
  CHECK(table.find("moments") != std::string::npos);
  CHECK(table.find("4.00 KiB") != std::string::npos);
  CHECK(table.find("total") != std::string::npos);

  arena.release(master);
  arena.release(grads);
  arena.release(again);
  CHECK(arena.current_bytes() == 0);
  CHECK(arena.live_blocks() == 0);
}

TEST_CASE("release refuses pointers the arena does not own, and double releases") {
  gpt::Arena arena("host");
  int local = 0;
  CHECK_THROWS_AS(arena.release(&local), std::invalid_argument);
  void* p = arena.allocate("x", "buffers", 10);
  arena.release(p);
  CHECK_THROWS_AS(arena.release(p), std::invalid_argument);
  arena.release(nullptr);  // ignored, like free(nullptr)
  void* empty_a = arena.allocate("empty", "buffers", 0);
  void* empty_b = arena.allocate("empty", "buffers", 0);
  CHECK(empty_a != empty_b);
}

TEST_CASE("tensors from the arena carry shape, dtype and device") {
  gpt::Arena arena("host");
  gpt::Tensor w = arena.allocate_tensor("h0.attn.w", "compute weights", {768, 2304}, gpt::DType::kF16);
  CHECK(w.describe() == "f16[768, 2304] on cpu");
  CHECK(arena.current_bytes() == 768 * 2304 * 2);
  CHECK_THROWS_AS(arena.allocate_tensor("bad", "buffers", {4, -1}, gpt::DType::kF32), std::invalid_argument);
  arena.release(w.data);
}

TEST_CASE("a capacity turns the arena into a budget with a useful message") {
  gpt::Arena arena("cuda:0 (planned)", 1 << 20);
  void* a = arena.allocate("a", "activations", 600 * 1024);
  try {
    arena.allocate("h11.mlp.fc.w", "compute weights", 600 * 1024);
    FAIL("expected ArenaFull");
  } catch (const gpt::ArenaFull& full) {
    const std::string message = full.what();
    CHECK(message.find("h11.mlp.fc.w") != std::string::npos);
    CHECK(message.find("cuda:0 (planned)") != std::string::npos);
    CHECK(message.find("1.00 MiB") != std::string::npos);
  }
  CHECK(arena.current_bytes() == 600 * 1024);  // the failed request left no trace
  arena.release(a);
  CHECK_NOTHROW(arena.release(arena.allocate("h11.mlp.fc.w", "compute weights", 600 * 1024)));
}

TEST_CASE("blocks come from the given source and all go back when the arena ends") {
  struct CountingSource : gpt::BlockSource {
    gpt::HostBlockSource host;
    int live = 0;
    void* acquire(size_t bytes) override {
      ++live;
      return host.acquire(bytes);
    }
    void release(void* block, size_t bytes) override {
      --live;
      host.release(block, bytes);
    }
    gpt::Device device() const override { return gpt::Device::kCUDA; }
  } source;
  {
    gpt::Arena arena("counted", gpt::Arena::kUnlimited, &source);
    arena.allocate("kept", "buffers", 100);
    arena.release(arena.allocate("returned", "buffers", 100));
    CHECK(source.live == 1);
    CHECK(arena.allocate_tensor("t", "buffers", {2}, gpt::DType::kF32).device == gpt::Device::kCUDA);
  }
  CHECK(source.live == 0);
}

TEST_CASE("allocations from two threads are all accounted") {
  gpt::Arena arena("host");
  auto work = [&arena](const char* category) {
    std::vector<void*> mine;
    for (int i = 0; i < 500; ++i) mine.push_back(arena.allocate("block", category, 256));
    for (int i = 0; i < 500; i += 2) arena.release(mine[i]);
  };
  std::thread other(work, "prefetch");
  work("compute");
  other.join();
  CHECK(arena.live_blocks() == 500);
  CHECK(arena.current_bytes() == 500 * 256);
}

TEST_CASE("byte counts print with binary units") {
  CHECK(gpt::format_bytes(512) == "512 B");
  CHECK(gpt::format_bytes(1536) == "1.50 KiB");
  CHECK(gpt::format_bytes(size_t{124} << 20) == "124.0 MiB");
  CHECK(gpt::format_bytes(size_t{3} << 30) == "3.00 GiB");
}

TEST_CASE("a large freed block serves the next request of its size, zero-filled again, below the peak") {
  gpt::Arena arena("recycling");
  const size_t big = size_t(1) << 20;
  auto* first = static_cast<uint8_t*>(arena.allocate("bucket", "buffers", big));
  std::memset(first, 0xab, big);
  arena.release(first);
  auto* again = static_cast<uint8_t*>(arena.allocate("bucket", "buffers", big));
  CHECK(again == first);  // the kept block, not a fresh one
  CHECK(std::all_of(again, again + big, [](uint8_t b) { return b == 0; }));
  CHECK(arena.current_bytes() == big);  // kept blocks are not in use: the ledger is unchanged
  arena.release(again);
  CHECK(arena.current_bytes() == 0);
  // Another size above the peak so far: the kept block is freed first, so the process never holds both.
  auto* other = static_cast<uint8_t*>(arena.allocate("other", "buffers", 2 * big));
  CHECK(std::all_of(other, other + 2 * big, [](uint8_t b) { return b == 0; }));
  arena.release(other);
}

TEST_CASE("a part of a category counts in both: the part's own peak, and the whole's peak of all parts") {
  gpt::Arena arena("host");
  void* a = arena.allocate("bucket", "buffers: gradient buckets", 1000);  // 1024
  void* b = arena.allocate("tile", "buffers: gathered units", 2048);
  arena.release(a);
  void* c = arena.allocate("bucket", "buffers: gradient buckets", 4096);
  auto usage = [&](const std::string& category) {
    for (const auto& u : arena.usage_by_category())
      if (u.category == category) return u;
    return gpt::Arena::CategoryUsage{};
  };
  CHECK(usage("buffers: gradient buckets").peak_bytes == 4096);
  CHECK(usage("buffers: gathered units").peak_bytes == 2048);
  CHECK(usage("buffers").peak_bytes == 2048 + 4096);  // not the parts' peaks added: 1024 was gone by then
  CHECK(usage("buffers").current_bytes == 2048 + 4096);
  CHECK(usage("buffers").blocks == 2);
  arena.release(b);
  arena.release(c);
  CHECK(usage("buffers").current_bytes == 0);
  CHECK(usage("buffers").blocks == 0);
  CHECK(arena.peak_bytes() == 2048 + 4096);
}

TEST_CASE("a counting block source: distinct ranges that nothing backs, and the arena's ledger over them") {
  gpt::CountingBlockSource source;
  gpt::Arena arena("dry", gpt::Arena::kUnlimited, &source);
  // 64 TiB "allocated" in no memory: the addresses are never touched.
  const size_t huge = size_t(1) << 45;
  void* a = arena.allocate("master", "master", huge);
  void* b = arena.allocate("moments", "moments", 2 * huge);
  CHECK(a != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(b) >= reinterpret_cast<uintptr_t>(a) + huge);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  arena.release(a);
  void* c = arena.allocate("small", "buffers", 10);
  CHECK(c != a);  // never reused: each block keeps its own address for the ledger
  CHECK(source.peak_bytes() == 3 * huge);
  CHECK(source.current_bytes() == 2 * huge + 64);
  CHECK(arena.peak_bytes() == 3 * huge);
}
