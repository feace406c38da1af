// The checked backend's memory really is closed outside its ops: a write from a forked child dies with
// SIGSEGV, while the same write inside an op (through the backend) works. A released block stays closed while
// the rest is open, and a block handed out again starts zero-filled.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <vector>

#include "tensor/arena.h"
#include "tests/seam/checked_ops.h"

namespace gpt::testing {
namespace {

// Whether writing a byte at p from a forked child kills it with SIGSEGV.
bool write_faults(void* p) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // die of the signal itself, even where a sanitizer reports faults
    *static_cast<volatile char*>(p) = 1;
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  if (WIFEXITED(status)) CHECK(WEXITSTATUS(status) == 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

TEST_CASE("device memory of the checked backend faults outside ops and works inside them") {
  CheckedOps ops;
  Arena arena("checked", Arena::kUnlimited, &ops.device_memory());
  const Tensor t = arena.allocate_tensor("t", "activations", {1000}, DType::kF32);
  const std::vector<float> host(1000, 3.0f);
  ops.upload(t, host.data());
  std::vector<float> back(1000, 0.0f);
  ops.download(back.data(), t);
  CHECK(back == host);
  CHECK(ops.sum(t) == 3000.0);

  CHECK(write_faults(t.data));  // outside any op
}

TEST_CASE("released blocks stay closed while the rest is open, and come back zero-filled") {
  ProtectedMemory memory;
  const size_t bytes = 3 * 4096 + 5;  // not whole pages
  char* a = static_cast<char*>(memory.acquire(bytes));
  char* b = static_cast<char*>(memory.acquire(bytes));
  char* c = static_cast<char*>(memory.acquire(bytes));
  CHECK(write_faults(a));  // closed from the start

  memory.set_open(true);
  std::memset(b, 7, bytes);
  CHECK_FALSE(write_faults(a));
  memory.release(b, bytes);
  CHECK(write_faults(b));  // released: closed although the memory is open
  CHECK_FALSE(write_faults(c));

  // The same size again fills the gap (first fit), zero-filled, and open like the rest.
  char* again = static_cast<char*>(memory.acquire(bytes));
  CHECK(again == b);
  CHECK(std::vector<char>(again, again + bytes) == std::vector<char>(bytes, 0));
  CHECK_FALSE(write_faults(again));
  memory.set_open(false);
  CHECK(write_faults(again));
  CHECK(write_faults(c));

  // Adjacent live blocks open and close in one call; a gap splits them into two.
  const int64_t before = memory.protect_calls();
  memory.set_open(true);
  CHECK(memory.protect_calls() == before + 1);
  memory.release(again, bytes);
  memory.set_open(false);
  CHECK(memory.protect_calls() == before + 3);
  memory.release(a, bytes);
  memory.release(c, bytes);
}

}  // namespace
}  // namespace gpt::testing
