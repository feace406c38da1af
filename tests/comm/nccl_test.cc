// The NCCL communicator on real GPUs (CUDA builds; run under mpiexec through mpi_run.sh, one GPU per rank):
// every collective against values computed on the host, on device, mapped pinned and pageable host buffers,
// fp16/bf16 sums widened and scaled, subgroups, the input stream's ordering, and the meter's model bytes.
// Without a GPU for every rank (or with ranks sharing one) it prints SKIPPED and passes.
#include <cuda_runtime.h>  // the typed cudaMalloc/cudaHostAlloc overloads
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/nccl_communicator.h"
#include "comm/nccl_groups.h"
#include "comm/nccl_traffic.h"
#include "tensor/half.h"
#include "tests/comm/mpi_test_env.h"

namespace gpt::comm::testing {
namespace {

void cuda_ok(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + cudaGetErrorString(status));
}

// The NCCL world, created once, or nullptr (and SKIPPED printed) when the ranks do not each have a GPU. The
// decision is collective, so every rank makes the same one.
std::unique_ptr<Communicator> made;
bool decided = false;

Communicator* nccl_world() {
  if (decided) return made.get();
  decided = true;
  const int device = choose_nccl_device(world());
  if (device < 0) {
    if (world().rank() == 0) std::printf("SKIPPED: the NCCL communicator needs one GPU per rank\n");
    return nullptr;
  }
  made = make_nccl_communicator(world(), NcclOptions{.device = device, .comm_timeout_s = 60});
  return made.get();
}

// Device memory holding a copy of host values, read back with to_host().
template <typename T>
struct DeviceArray {
  explicit DeviceArray(const std::vector<T>& values) : n(values.size()) {
    cuda_ok(cudaMalloc(&data, n * sizeof(T) + 1));
    cuda_ok(cudaMemcpy(data, values.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(data); }
  std::vector<T> to_host() const {
    std::vector<T> out(n);
    cuda_ok(cudaMemcpy(out.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  T* data = nullptr;
  size_t n;
};

TEST_CASE("nccl: all_gather on device memory, in place and not, ordered after the input stream") {
  Communicator* comm = nccl_world();
  if (!comm) return;
  const int w = comm->size(), r = comm->rank();
  const size_t b = 1000;
  std::vector<uint8_t> expected(w * b);
  for (int p = 0; p < w; ++p) std::memset(expected.data() + p * b, 7 * p + 1, b);
  DeviceArray<uint8_t> send(std::vector<uint8_t>(b, 0)), recv(std::vector<uint8_t>(w * b, 0));
  // The input is written on another stream; the communicator made with it as input stream waits for it.
  cudaStream_t producer;
  cuda_ok(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  int device = 0;
  cuda_ok(cudaGetDevice(&device));  // the one nccl_world() selected
  auto ordered = make_nccl_communicator(world(), NcclOptions{.device = device, .input_stream = producer});
  cuda_ok(cudaMemsetAsync(send.data, 7 * r + 1, b, producer));
  ordered->all_gather(send.data, recv.data, b, Phase::kOther).wait();
  CHECK(recv.to_host() == expected);
  // In place: this rank's block already sits in recv.
  DeviceArray<uint8_t> in_place(std::vector<uint8_t>(w * b, 0));
  cuda_ok(cudaMemset(in_place.data + r * b, 7 * r + 1, b));
  comm->all_gather(in_place.data + r * b, in_place.data, b, Phase::kOther).wait();
  CHECK(in_place.to_host() == expected);
  ordered.reset();
  cudaStreamDestroy(producer);
}

TEST_CASE("nccl: reduce_scatter sums fp16 and bf16 on the wire, widens to fp32 and scales") {
  Communicator* comm = nccl_world();
  if (!comm) return;
  const int w = comm->size(), r = comm->rank();
  const size_t count = 3000;
  const float scale = 1.0f / float(w);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    auto to_wire = [&](float x) { return dtype == DType::kF16 ? f32_to_f16(x) : f32_to_bf16(x); };
    std::vector<uint16_t> mine(w * count);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = to_wire(float((i + r) % 17));  // small integers: exact
    DeviceArray<uint16_t> send(mine);
    DeviceArray<float> recv(std::vector<float>(count, -1.0f));
    comm->reduce_scatter(send.data, dtype, recv.data, count, scale, Phase::kGradReduce).wait();
    const std::vector<float> got = recv.to_host();
    int wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int p = 0; p < w; ++p) sum += float((r * count + i + p) % 17);
      wrong += got[i] != sum * scale;
    }
    CHECK_MESSAGE(wrong == 0, dtype_name(dtype));
  }
}

TEST_CASE("nccl: fp32 reduce_scatter in place and a bf16 all_reduce with a scale") {
  Communicator* comm = nccl_world();
  if (!comm) return;
  const int w = comm->size(), r = comm->rank();
  const size_t count = 257;
  std::vector<float> values(w * count);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 5) + float(r);
  DeviceArray<float> data(values);
  comm->reduce_scatter(data.data, DType::kF32, data.data + r * count, count, 0.5f, Phase::kGradReduce).wait();
  const std::vector<float> got = data.to_host();
  int wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t at = r * count + i;
    wrong += got[at] != (float(w) * float(at % 5) + float(w * (w - 1) / 2)) * 0.5f;
  }
  CHECK(wrong == 0);

  std::vector<uint16_t> bf(1001);  // not a multiple of the ranks
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(float(i % 9));
  DeviceArray<uint16_t> reduced(bf);
  comm->all_reduce(reduced.data, DType::kBF16, bf.size(), 0.5f, Phase::kEval).wait();
  const std::vector<uint16_t> out = reduced.to_host();
  wrong = 0;
  for (size_t i = 0; i < bf.size(); ++i) wrong += out[i] != f32_to_bf16(float(w) * float(i % 9) * 0.5f);
  CHECK(wrong == 0);
}

TEST_CASE("nccl: all_to_all_v on mapped pinned memory, broadcast and sum_over_ranks on pageable memory") {
  Communicator* comm = nccl_world();
  if (!comm) return;
  const int w = comm->size(), r = comm->rank();
  auto block = [](int from, int to) -> size_t { return size_t(37 * from + 101 * to) % 300; };
  std::vector<size_t> send_bytes(w), recv_bytes(w);
  size_t sent = 0, received = 0;
  for (int p = 0; p < w; ++p) {
    sent += send_bytes[p] = block(r, p);
    received += recv_bytes[p] = block(p, r);
  }
  uint8_t *send = nullptr, *recv = nullptr;
  cuda_ok(cudaHostAlloc(&send, sent + 1, cudaHostAllocMapped));
  cuda_ok(cudaHostAlloc(&recv, received + 1, cudaHostAllocMapped));
  for (size_t at = 0, p = 0; p < size_t(w); at += send_bytes[p], ++p)
    std::memset(send + at, 10 * r + int(p), send_bytes[p]);
  comm->all_to_all_v(send, send_bytes, recv, recv_bytes, Phase::kGradReduce).wait();
  int wrong = 0;
  for (size_t at = 0, p = 0; p < size_t(w); at += recv_bytes[p], ++p) {
    for (size_t k = 0; k < recv_bytes[p]; ++k) wrong += recv[at + k] != uint8_t(10 * p + r);
  }
  CHECK(wrong == 0);
  cudaFreeHost(send);
  cudaFreeHost(recv);

  std::vector<uint8_t> payload(5000, uint8_t(r == w - 1 ? 42 : 0));
  comm->broadcast(payload.data(), payload.size(), w - 1, Phase::kOther).wait();
  CHECK(payload == std::vector<uint8_t>(5000, 42));
  comm->barrier().wait();
  TrafficCounts mine;
  mine.bytes[0][0] = uint64_t(r) + 1;
  CHECK(sum_over_ranks(*comm, mine).bytes[0][0] == uint64_t(w) * (w + 1) / 2);
}

TEST_CASE("nccl: the meter records the ring model's bytes; subgroups work like the MPI ones") {
  Communicator* comm = nccl_world();
  if (!comm) return;
  const Topology& t = comm->topology();
  const int w = comm->size(), r = comm->rank();
  DeviceArray<uint8_t> send(std::vector<uint8_t>(3000, 1)), recv(std::vector<uint8_t>(3000 * w, 0));
  const TrafficCounts before = comm->meter().snapshot();
  comm->all_gather(send.data, recv.data, 3000, Phase::kParamGatherFwd).wait();
  const TrafficCounts delta = comm->meter().snapshot() - before;
  std::vector<int> ranks(w);
  std::iota(ranks.begin(), ranks.end(), 0);
  const LinkBytes model = RingTraffic(t, ranks).all_gather(r, 3000);
  CHECK(delta.at(Phase::kParamGatherFwd, Link::kIntraNode) == model.intra);
  CHECK(delta.at(Phase::kParamGatherFwd, Link::kInterNode) == model.inter);

  std::vector<int> node;
  for (int i = t.node() * t.ranks_per_node; i < (t.node() + 1) * t.ranks_per_node; ++i) node.push_back(i);
  std::unique_ptr<Communicator> group = comm->subgroup(node);
  REQUIRE(group);
  CHECK(group->rank() == t.local_rank());
  CHECK(group->world_rank_of(0) == node.front());
  std::vector<int> only_first = {0};
  std::unique_ptr<Communicator> first = comm->subgroup(only_first);
  CHECK((first != nullptr) == (r == 0));
  DeviceArray<float> one(std::vector<float>{1.0f});
  group->all_reduce(one.data, DType::kF32, 1, 1.0f, Phase::kOther).wait();
  CHECK(one.to_host()[0] == float(t.ranks_per_node));
}

// Last in the file, so last to run: the NCCL world goes before the MPI session finalizes.
TEST_CASE("nccl: the world communicator is destroyed before MPI ends") {
  made.reset();
}

}  // namespace
}  // namespace gpt::comm::testing
