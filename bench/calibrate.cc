// bench/calibrate: measures the planner's inputs (gpt_train --plan) on the machine and cluster it runs on, so
// that a predicted step time can be set beside a measured one without any training run feeding it. Every
// rank does the same work at the same time: on an emulated cluster the ranks share the machine's cores, and
// that contention belongs in each rate. It measures
//   - the compute rate: a micro-batch's forward and backward of the model (the CPU layer loop), as TFLOP/s
//     by the planner's count (6N + 12 L C T per token), mean over the ranks;
//   - the host rates per element of one gather unit's size (a transformer block): decoding fp16 into fp32
//     weights, quantizing (qgZ's int4 gradient blocks), dequantizing (qwZ's int8 weights and qgZ's
//     dequantize-and-add, half each), the ring reduction's fp16 sums, and AdamW with its fp16 compute copy;
//     and the bytes per second of zero-filled buffers allocated and freed as the gradient reduction does;
//   - the links: a ring all-gather of one fp16 gather unit over all ranks (the bytes that cross nodes, from
//     the traffic meter, per node per second: the inter-node bandwidth; the bytes each rank sent per second:
//     the rate a rank's CPU sends at, when the links are not what limits it), the same inside each node (the
//     intra-node bandwidth), and a 64-byte all-gather (the latency of one ring step).
// Rank 0 prints one JSON line; its "plan_flags" are the gpt_train --plan flags that carry the numbers.
//   scripts/cluster run -- bazel-bin/bench/calibrate --layers 12 --hidden 768 --heads 12 --seq 64 --batch 1
//       --threads 1
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/flags.h"
#include "comm/mpi_main.h"
#include "comm/wire_reduce.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "kernels/quant/quantize.h"
#include "model/model.h"
#include "tensor/arena.h"
#include "train/model_flags.h"
#include "zero/config.h"

namespace {

using gpt::DType;
using gpt::Tensor;
using gpt::comm::Communicator;
using gpt::comm::Link;
using gpt::comm::Phase;
using Clock = std::chrono::steady_clock;

struct Options {
  gpt::GPTConfig config;
  int batch = 1, threads = 1, repeats = 5;
};

bool parse(int argc, char** argv, Options& o) {
  o.config.seq_len = 64;
  gpt::FlagParser flags("bench/calibrate", "Measures gpt_train --plan's compute, host and link rates here.");
  gpt::add_bench_shape_flags(flags, &o.config, &o.batch, "sequences per micro-batch");
  flags.add_int("--threads", &o.threads, "CPU threads per rank (as gpt_train --threads)", 1, 1024);
  flags.add_int("--repeats", &o.repeats, "timings per measurement (the median is kept)", 1, 1000);
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &o.config);
  return true;
}

double mean_over_ranks(Communicator& world, double value) {
  world.all_reduce(&value, DType::kF64, 1, 1.0f / float(world.size()), Phase::kOther).wait();
  return value;
}

// Seconds of one `work` when every rank does it at once: from a common start until the last rank is done
// (a rank's own clock would miss the time it waits for a core its peers hold), repeated so that each timing
// spans at least 0.2 s; the median of `repeats` timings after one warm-up.
double timed(Communicator& world, int repeats, const std::function<void()>& work) {
  auto start = Clock::now();
  work();
  // Every rank must run the same number of works (they may be collectives): the mean of the ranks' times.
  const double once = mean_over_ranks(world, std::chrono::duration<double>(Clock::now() - start).count());
  const int inner = int(std::min(1000.0, std::ceil(0.2 / std::max(once, 1e-6))));
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    world.barrier().wait();
    start = Clock::now();
    for (int i = 0; i < inner; ++i) work();
    world.barrier().wait();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count() / inner);
  }
  std::nth_element(seconds.begin(), seconds.begin() + repeats / 2, seconds.end());
  return seconds[size_t(repeats / 2)];
}

struct Rates {
  double tflops = 0, forward_s = 0, backward_s = 0;
  double decode = 0, quantize = 0, dequantize = 0, reduce = 0, optimizer = 0;  // elements per second
  double inter_bytes_per_s = 0, intra_bytes_per_s = 0, host_comm_bytes_per_s = 0, latency_s = 0;
  double buffer_bytes_per_s = 0;
};

// A micro-batch's forward and backward on the CPU layer loop, every rank at once.
void measure_compute(Communicator& world, const Options& o, Rates& r) {
  gpt::GPT2<float> model(o.config, o.batch);
  model.init(1);
  std::vector<int32_t> tokens(size_t(o.batch) * o.config.seq_len);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % o.config.vocab);
  r.forward_s = mean_over_ranks(world, timed(world, o.repeats, [&] {
                                  model.zero_grad();
                                  model.forward(tokens.data(), tokens.data());
                                }));
  r.backward_s = mean_over_ranks(world, timed(world, o.repeats,
                                              [&] {
                                                model.zero_grad();
                                                model.forward(tokens.data(), tokens.data());
                                                model.backward(1.0f);
                                              })) -
                 r.forward_s;
  const double flops = o.config.model_flops_per_token() * o.batch * o.config.seq_len;
  r.tflops = flops / (r.forward_s + r.backward_s) / 1e12;
}

// One block's elements through each host operation, every rank at once.
void measure_host(Communicator& world, const Options& o, int64_t n, Rates& r) {
  const std::unique_ptr<gpt::Ops> ops = std::make_unique<gpt::CpuOps>();
  const size_t count = size_t(n);
  std::vector<float> f32(count, 0.5f), f32b(count, 0.25f), m(count, 0.0f), v(count, 0.0f);
  std::vector<uint16_t> f16(count, 0), f16b(count, 0);
  const auto tensor = [n](void* data, DType dtype) { return Tensor{data, {n}, dtype, gpt::Device::kCPU}; };
  const Tensor x = tensor(f32.data(), DType::kF32), g = tensor(f32b.data(), DType::kF32);
  const Tensor h = tensor(f16.data(), DType::kF16);
  ops->cast(h, x);
  const auto per_s = [&](const std::function<void()>& work) {
    return double(n) / mean_over_ranks(world, timed(world, o.repeats, work));
  };
  r.decode = per_s([&] { ops->cast(x, h); });
  const gpt::ZeroConfig defaults;
  std::vector<uint8_t> q4(gpt::quant::quantized_bytes(n, 4, defaults.gradient_block));
  std::vector<uint8_t> q8(gpt::quant::quantized_bytes(n, 8, defaults.weight_block));
  const Tensor t4{q4.data(), {int64_t(q4.size())}, DType::kI8, gpt::Device::kCPU};
  const Tensor t8{q8.data(), {int64_t(q8.size())}, DType::kI8, gpt::Device::kCPU};
  r.quantize = per_s([&] { ops->quantize(t4, g, n, 1, 4, defaults.gradient_block); });
  ops->quantize(t8, h, n, 1, 8, defaults.weight_block);
  r.dequantize = 2 * per_s([&] {
                   ops->dequantize(x, t8, n, 1, 8, defaults.weight_block, DType::kF16);
                   ops->dequantize_add(g, t4, n, 1, 4, defaults.gradient_block);
                 });
  r.reduce =
      per_s([&] { gpt::comm::add_to_wire(f16b.data(), f16.data(), f16b.data(), DType::kF16, size_t(n)); });
  gpt::AdamWHyper hyper;
  int64_t step = 0;
  r.optimizer = per_s([&] {
    ops->adamw(x, g, tensor(m.data(), DType::kF32), tensor(v.data(), DType::kF32), hyper, ++step, 1.0f);
    ops->cast(h, x);
  });
}

// The gradient reduction's zero-filled buffers, allocated and freed through a host arena as the engine's are
// (tensor/arena.h): per bucket of one unit's n elements, the packed bucket (4n bytes), its result (n) and two
// stages (n/2 each), with two buckets in flight. Bytes per second.
double measure_buffers(Communicator& world, const Options& o, int64_t n) {
  gpt::Arena arena("calibrate");
  const size_t sizes[4] = {size_t(n) * 4, size_t(n), size_t(n) / 2, size_t(n) / 2};
  std::vector<void*> older, newer;
  const auto bucket = [&] {
    for (void* block : older) arena.release(block);
    older = std::move(newer);
    newer.clear();
    for (size_t bytes : sizes) newer.push_back(arena.allocate("bucket", "calibrate", bytes));
  };
  const double seconds = mean_over_ranks(world, timed(world, o.repeats, bucket));
  for (void* block : older) arena.release(block);
  for (void* block : newer) arena.release(block);
  return double(n) * 6 / seconds;
}

// The bytes this rank sends across nodes and inside its node in one `op` (its meter, shared by subgroups).
std::pair<double, double> bytes_of_one(Communicator& c, const std::function<void()>& op) {
  const gpt::comm::TrafficCounts before = c.meter().snapshot();
  op();
  const gpt::comm::TrafficCounts after = c.meter().snapshot();
  return {double(after.total(Link::kInterNode) - before.total(Link::kInterNode)),
          double(after.total(Link::kIntraNode) - before.total(Link::kIntraNode))};
}

// Ring all-gathers of one fp16 gather unit (n elements), over the world and inside each node, and of 64
// bytes over the world.
void measure_links(Communicator& world, Communicator& node, const Options& o, int64_t n, Rates& r) {
  const int W = world.size(), N = world.topology().num_nodes();
  const size_t per_rank = size_t(n) * 2 / size_t(W) / 64 * 64;
  std::vector<uint8_t> part(per_rank, 1), full(per_rank * size_t(W));
  const auto gather = [&] {
    world.all_gather(part.data(), full.data(), per_rank, Phase::kParamGatherFwd).wait();
  };
  const auto [inter, intra] = bytes_of_one(world, gather);
  const double seconds = mean_over_ranks(world, timed(world, o.repeats, gather));
  // Across nodes: what all ranks send over node boundaries, per node, per second of the gather.
  r.inter_bytes_per_s = N > 1 ? mean_over_ranks(world, inter) * W / N / seconds : 0;
  r.host_comm_bytes_per_s = mean_over_ranks(world, inter + intra) / seconds;
  const size_t node_part = per_rank * size_t(W) / size_t(node.size());
  std::vector<uint8_t> node_full(node_part * size_t(node.size()));
  const auto node_gather = [&] {
    node.all_gather(node_full.data() + size_t(node.rank()) * node_part, node_full.data(), node_part,
                    Phase::kParamGatherFwd)
        .wait();
  };
  const double node_sent = bytes_of_one(node, node_gather).second;
  r.intra_bytes_per_s =
      mean_over_ranks(world, node_sent) / mean_over_ranks(world, timed(world, o.repeats, node_gather));
  std::vector<uint8_t> tiny(64), tiny_full(64 * size_t(W));
  const double tiny_seconds = timed(world, o.repeats, [&] {
    world.all_gather(tiny.data(), tiny_full.data(), tiny.size(), Phase::kOther).wait();
  });
  r.latency_s = mean_over_ranks(world, tiny_seconds) / std::max(W - 1, 1);
}

std::string rate_text(double bytes_per_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4gB/s", bytes_per_s);
  return text;
}

void print(const Options& o, int64_t n, const Rates& r) {
  std::string flags = "--gpu-tflops " + std::to_string(r.tflops) + " --host-comm-bandwidth " +
                      rate_text(r.host_comm_bytes_per_s) + " --intra-node-bandwidth " +
                      rate_text(r.intra_bytes_per_s) + " --buffer-fill-bandwidth " +
                      rate_text(r.buffer_bytes_per_s);
  if (r.inter_bytes_per_s > 0) flags += " --inter-node-bandwidth " + rate_text(r.inter_bytes_per_s);
  char rest[256];
  std::snprintf(rest, sizeof rest,
                " --decode-rate %.4g --quantize-rate %.4g --dequantize-rate %.4g --reduce-rate %.4g "
                "--optimizer-rate %.4g --link-latency-us %.1f",
                r.decode, r.quantize, r.dequantize, r.reduce, r.optimizer, r.latency_s * 1e6);
  flags += rest;
  std::printf(
      "{\"threads\": %d, \"micro_batch\": %d, \"unit_elements\": %lld, \"forward_s\": %.5f, "
      "\"backward_s\": %.5f, \"compute_tflops\": %.6f, \"decode_per_s\": %.4g, \"quantize_per_s\": %.4g, "
      "\"dequantize_per_s\": %.4g, \"reduce_per_s\": %.4g, \"optimizer_per_s\": %.4g, "
      "\"host_comm_bytes_per_s\": %.4g, \"intra_node_bytes_per_s\": %.4g, \"inter_node_bytes_per_s\": %.4g, "
      "\"link_latency_us\": %.2f, \"buffer_bytes_per_s\": %.4g, \"plan_flags\": \"%s\"}\n",
      o.threads, o.batch, (long long)n, r.forward_s, r.backward_s, r.tflops, r.decode, r.quantize,
      r.dequantize, r.reduce, r.optimizer, r.host_comm_bytes_per_s, r.intra_bytes_per_s, r.inter_bytes_per_s,
      r.latency_s * 1e6, flags.c_str());
}

int run(gpt::comm::MpiSession& session, int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  gpt::cpu::set_num_threads(o.threads);
  const std::unique_ptr<Communicator> world = session.world(gpt::comm::MpiOptions{});
  const gpt::comm::Topology& t = world->topology();
  std::vector<int> members;
  for (int l = 0; l < t.ranks_per_node; ++l) members.push_back(t.node() * t.ranks_per_node + l);
  const std::unique_ptr<Communicator> node = world->subgroup(members);
  const int64_t C = o.config.hidden, n = 12 * C * C + 13 * C;  // one transformer block's parameters
  Rates r;
  measure_compute(*world, o, r);
  measure_host(*world, o, n, r);
  r.buffer_bytes_per_s = measure_buffers(*world, o, n);
  measure_links(*world, *node, o, n, r);
  if (world->rank() == 0) print(o, n, r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/calibrate", argc, argv,
                                 [&](gpt::comm::MpiSession& session) { return run(session, argc, argv); });
}
