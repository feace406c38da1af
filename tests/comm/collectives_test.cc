// Correctness of every collective of the MPI backend at the world size this binary was launched with:
// byte-exact gathers, exchanges and broadcasts (uneven and empty sizes included), and reductions checked bit
// for bit against the ring order replayed on one rank and against a float64 sum within the rounding bound.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "comm/request.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/comm/reference.h"

namespace gpt::comm::testing {
namespace {

constexpr DType kWireTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// Checks every element of a reduction result against the replayed ring and the float64 bound.
void check_reduced(const float* got, size_t n, size_t first_global, int chunk, DType dtype, int seed,
                   float scale, bool rounded_to_wire) {
  const int w = world().size();
  size_t exact_mismatches = 0, bound_violations = 0;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t g = first_global + i;
    float expected = ring_sum(w, chunk, g, dtype, seed, scale);
    if (rounded_to_wire) expected = round_to(expected, dtype);
    if (std::memcmp(&expected, &got[i], sizeof(float)) != 0) ++exact_mismatches;
    double magnitude = 0;
    const double exact = exact_sum(w, g, dtype, seed, &magnitude) * scale;
    double bound = ring_error_bound(w, dtype, magnitude, scale);
    if (rounded_to_wire) bound += unit_roundoff(dtype) * (std::fabs(exact) + bound) + 0x1.0p-25;
    const double error = std::fabs(double(got[i]) - exact);
    worst = std::max(worst, error / bound);
    if (error > bound) ++bound_violations;
  }
  INFO("world rank ", world().rank(), ", dtype ", std::string(dtype_name(dtype)), ", ", n,
       " elements, worst error/bound ", worst);
  CHECK(exact_mismatches == 0);
  CHECK(bound_violations == 0);
}

TEST_CASE("all_gather: every rank's bytes in rank order, any size, in and out of place") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  for (size_t bytes : {size_t(0), size_t(1), size_t(7), size_t(4099), size_t(300001)}) {
    INFO("world rank ", r, ", bytes per rank ", bytes);
    const auto mine = pattern(r, bytes, 1);
    std::vector<uint8_t> out(w * bytes + 1, 0xAB);
    comm.all_gather(mine.data(), out.data(), bytes, Phase::kParamGatherFwd).wait();
    bool same = true;
    for (int p = 0; p < w; ++p)
      same &= pattern(p, bytes, 1) ==
              std::vector<uint8_t>(out.begin() + p * bytes, out.begin() + (p + 1) * bytes);
    CHECK(same);
    CHECK(out.back() == 0xAB);  // nothing written past the end

    std::vector<uint8_t> in_place(w * bytes);
    std::copy(mine.begin(), mine.end(), in_place.begin() + r * bytes);
    comm.all_gather(in_place.data() + r * bytes, in_place.data(), bytes, Phase::kParamGatherBwd).wait();
    CHECK(std::equal(in_place.begin(), in_place.end(), out.begin()));
  }
}

TEST_CASE("reduce_scatter: the replayed ring bit for bit, and float64 within the rounding bound") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  for (DType dtype : kWireTypes) {
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(1000), size_t(33333)}) {
      const int seed = 10 + int(count % 7);
      std::vector<float> values(w * count);
      for (size_t i = 0; i < values.size(); ++i) values[i] = input_value(r, i, dtype, seed);
      const auto wire = encode(values, dtype);
      std::vector<float> out(count + 1, -7.0f);
      const float scale = 1.0f / float(w);
      comm.reduce_scatter(wire.data(), dtype, out.data(), count, scale, Phase::kGradReduce).wait();
      check_reduced(out.data(), count, r * count, r, dtype, seed, scale, /*rounded_to_wire=*/false);
      CHECK(out[count] == -7.0f);
    }
  }
}

TEST_CASE("reduce_scatter: fp32 in place, the result over this rank's own chunk") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  const size_t count = 3001;
  std::vector<float> data(w * count);
  for (size_t i = 0; i < data.size(); ++i) data[i] = input_value(r, i, DType::kF32, 31);
  comm.reduce_scatter(data.data(), DType::kF32, data.data() + r * count, count, 0.25f, Phase::kGradReduce)
      .wait();
  check_reduced(data.data() + r * count, count, r * count, r, DType::kF32, 31, 0.25f,
                /*rounded_to_wire=*/false);
}

TEST_CASE("reduce_scatter and all_reduce in f64: fp64 sums, exact where fp32 would round") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  // 1 + k 2^-40: representable in fp64, not in fp32, and the sums over up to 8 ranks stay exact in fp64.
  auto value = [](int rank, size_t i) { return 1.0 + std::ldexp(double(i % 1000 + rank), -40); };
  auto sum = [&](size_t i) {
    double total = 0;
    for (int p = 0; p < w; ++p) total += value(p, i);
    return total * 0.5;
  };
  const size_t count = 1001;
  std::vector<double> data(w * count), out(count);
  for (size_t i = 0; i < data.size(); ++i) data[i] = value(r, i);
  comm.reduce_scatter(data.data(), DType::kF64, out.data(), count, 0.5f, Phase::kGradReduce).wait();
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += out[i] != sum(r * count + i);
  CHECK(wrong == 0);

  std::vector<double> all(count + 3);  // uneven chunks
  for (size_t i = 0; i < all.size(); ++i) all[i] = value(r, i);
  comm.all_reduce(all.data(), DType::kF64, all.size(), 0.5f, Phase::kOther).wait();
  wrong = 0;
  for (size_t i = 0; i < all.size(); ++i) wrong += all[i] != sum(i);
  CHECK(wrong == 0);
}

TEST_CASE("all_reduce: same bits on every rank, uneven and empty chunks") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  for (DType dtype : kWireTypes) {
    for (size_t count :
         {size_t(0), size_t(1), size_t(w > 1 ? w - 1 : 1), size_t(13), size_t(1001), size_t(65537)}) {
      const int seed = 20 + int(count % 5);
      std::vector<float> values(count);
      for (size_t i = 0; i < count; ++i) values[i] = input_value(r, i, dtype, seed);
      auto wire = encode(values, dtype);
      const float scale = count % 2 ? 1.0f : 0.5f;
      comm.all_reduce(wire.data(), dtype, count, scale, Phase::kOther).wait();
      std::vector<float> got(count);
      for (size_t i = 0; i < count; ++i) got[i] = decode(wire.data(), i, dtype);
      const size_t chunk = (count + w - 1) / w;
      for (int j = 0; j < w; ++j) {
        const size_t begin = std::min(count, j * chunk), end = std::min(count, (j + 1) * chunk);
        check_reduced(got.data() + begin, end - begin, begin, j, dtype, seed, scale,
                      /*rounded_to_wire=*/true);
      }
    }
  }
}

TEST_CASE("all_to_all_v: uneven blocks, empty ones included, each from the right rank") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  auto block = [](int from, int to) -> size_t {
    return (from + 2 * to) % 3 == 0 ? 0 : 1000 * (from + 1) + 17 * to;
  };
  std::vector<size_t> send_bytes(w), recv_bytes(w);
  std::vector<uint8_t> send;
  for (int p = 0; p < w; ++p) {
    send_bytes[p] = block(r, p);
    recv_bytes[p] = block(p, r);
    const auto part = pattern(r * 64 + p, send_bytes[p], 3);
    send.insert(send.end(), part.begin(), part.end());
  }
  std::vector<uint8_t> expected;
  for (int p = 0; p < w; ++p) {
    const auto part = pattern(p * 64 + r, recv_bytes[p], 3);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  std::vector<uint8_t> recv(expected.size(), 0);
  comm.all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes, Phase::kGradReduce).wait();
  INFO("world rank ", r);
  CHECK(recv == expected);
}

TEST_CASE("broadcast: from every root, one segment and many") {
  Communicator& comm = world();
  const int w = comm.size(), r = comm.rank();
  for (int root = 0; root < w; ++root) {
    for (size_t bytes : {size_t(0), size_t(1), size_t(3 * (1 << 20) + 5)}) {
      auto data = r == root ? pattern(root, bytes, 4) : std::vector<uint8_t>(bytes, 0);
      comm.broadcast(data.data(), bytes, root, Phase::kOther).wait();
      INFO("world rank ", r, ", root ", root, ", bytes ", bytes);
      CHECK(data == pattern(root, bytes, 4));
    }
  }
}

TEST_CASE("barrier: no rank leaves before the last one arrives") {
  Communicator& comm = world();
  if (comm.size() == 1) {
    comm.barrier().wait();
    return;
  }
  comm.barrier().wait();
  const auto start = std::chrono::steady_clock::now();
  if (comm.rank() == comm.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  comm.barrier().wait();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  INFO("world rank ", comm.rank());
  CHECK(ms >= 100.0);  // not 200: ranks leave the first barrier at slightly different times
}

TEST_CASE("Request: a default one is complete; waiting twice is fine; done() turns true") {
  Request none;
  CHECK(none.done());
  none.wait();
  std::vector<uint8_t> mine(8, 1), all(8 * world().size());
  Request request = world().all_gather(mine.data(), all.data(), 8, Phase::kEval);
  request.wait();
  CHECK(request.done());
  request.wait();
}

TEST_CASE("Request::wait_block: returns once the block is reported or the operation is over; rethrows") {
  auto state = std::make_shared<Request::State>(nullptr, Phase::kEval);
  Request request(state);
  state->block_arrived(2);
  request.wait_block(2);
  CHECK_FALSE(request.done());
  std::thread backend([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    state->complete();
  });
  request.wait_block(0);  // never reported: the completion releases it
  backend.join();
  CHECK(request.done());

  auto failing = std::make_shared<Request::State>(nullptr, Phase::kEval);
  failing->complete(std::make_exception_ptr(std::runtime_error("link down")));
  CHECK_THROWS_AS(Request(failing).wait_block(1), std::runtime_error);
  Request().wait_block(3);  // a default Request is complete
}

TEST_CASE("argument errors throw at the call, on the caller's thread, before anything is sent") {
  Communicator& comm = world();
  std::vector<uint8_t> buffer(64 * comm.size());
  float out[8];
  CHECK_THROWS_AS(comm.reduce_scatter(buffer.data(), DType::kI8, out, 1, 1.0f, Phase::kGradReduce),
                  std::invalid_argument);
  CHECK_THROWS_AS(comm.all_reduce(buffer.data(), DType::kI8, 1, 1.0f, Phase::kOther), std::invalid_argument);
  CHECK_THROWS_AS(comm.broadcast(buffer.data(), 1, comm.size(), Phase::kOther), std::invalid_argument);
  CHECK_THROWS_AS(
      comm.all_to_all_v(buffer.data(), {1}, buffer.data(), {1, 2, 3, 4, 5, 6, 7, 8, 9}, Phase::kOther),
      std::invalid_argument);
  CHECK_THROWS_AS(comm.all_gather(nullptr, buffer.data(), 4, Phase::kOther), std::invalid_argument);
  CHECK_THROWS_AS(comm.world_rank_of(comm.size()), std::out_of_range);
}

}  // namespace
}  // namespace gpt::comm::testing
