// The checked backend's memory really is closed outside its ops: a write from a forked child dies with
// SIGSEGV, while the same write inside an op (through the backend) works.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <vector>

#include "tensor/arena.h"
#include "tests/seam/checked_ops.h"

namespace gpt::testing {
namespace {

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

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);          // die of the signal itself, even where a sanitizer reports faults
    static_cast<float*>(t.data)[0] = 1.0f;  // outside any op: must fault
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

}  // namespace
}  // namespace gpt::testing
