// ZeRO++ under MPI on simulated nodes (2 x 2 and 2 x 4): qgZ's values against a float64 mean within the
// quantization bound, qwZ's gathered weights against dequant(quant(shard)), hpZ's bit-identical weights and
// losses, overflow with qgZ, and every configuration's bytes by phase against closed forms derived here from
// the model's shape.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/random.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "kernels/quant/quantize.h"
#include "model/params.h"
#include "tensor/arena.h"
#include "tensor/half.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/quant/reference.h"
#include "tests/zero/engine_harness.h"
#include "train/batches.h"
#include "zero/gather.h"
#include "zero/qgz.h"
#include "zero/reduce.h"
#include "zero/traffic_model.h"

namespace {

using gpt::DType;
using gpt::comm::Link;
using gpt::comm::Phase;
using gpt::testing::RunResult;
using gpt::testing::RunSpec;

gpt::comm::Communicator& world() {
  return gpt::comm::testing::world();
}
const gpt::comm::Topology& topology() {
  return world().topology();
}

struct OneThread {
  OneThread() { gpt::cpu::set_num_threads(1); }
} one_thread;

// Groups every rank creates in the same order: its node, its cross-node peers, and hpZ groups of h.
struct Groups {
  std::unique_ptr<gpt::comm::Communicator> node, cross, hpz;
};

Groups make_groups(int h) {
  const auto& t = topology();
  const int L = t.ranks_per_node, N = t.num_nodes(), r = t.world_rank;
  std::vector<int> node, cross, hpz;
  for (int i = t.node() * L; i < (t.node() + 1) * L; ++i) node.push_back(i);
  for (int n = 0; n < N; ++n) cross.push_back(n * L + t.local_rank());
  for (int i = r / h * h; i < r / h * h + h; ++i) hpz.push_back(i);
  Groups g;
  g.node = world().subgroup(node);
  g.cross = world().subgroup(cross);
  g.hpz = world().subgroup(hpz);
  return g;
}

// Rank `rank`'s input value at index i: a mix of scales, so blocks have different absmax.
float input_value(int rank, int64_t i) {
  const double u = gpt::random::uniform(gpt::random::derive_key(99, rank), uint64_t(i));
  const double scale = (i / 97) % 3 == 0 ? 1e-3 : 1.0;
  return float((u - 0.5) * scale * (1 + rank % 3));
}

std::vector<float> scales_of(const float* x, int64_t n, int block) {
  std::vector<uint8_t> q(gpt::quant::quantized_bytes(n, 4, block));
  gpt::quant::quantize_slice(x, n, 4, block, q.data());
  const int64_t blocks = gpt::quant::block_count(n, block);
  std::vector<float> s(blocks);
  std::memcpy(s.data(), q.data() + gpt::quant::data_bytes(n, 4), blocks * sizeof(float));
  return s;
}

}  // namespace

TEST_CASE("qgZ: rank r gets the mean of slice r within the two quantization stages' bound") {
  const auto& t = topology();
  const int W = world().size(), L = t.ranks_per_node, N = t.num_nodes();
  if (N < 2) {
    MESSAGE("one node: qgZ falls back to the ring; nothing to check here");
    return;
  }
  Groups g = make_groups(1);
  const int block = 64;
  const int64_t chunk = 1000;  // not a multiple of the block: a short last block per chunk
  std::vector<float> input(size_t(W) * chunk);
  for (int64_t i = 0; i < int64_t(input.size()); ++i) input[i] = input_value(t.world_rank, i);
  gpt::QgzExchange exchange;
  bool finite = false;
  gpt::Arena arena;
  gpt::EventLog events(false);
  const gpt::EngineContext context{gpt::cpu_ops(), arena, arena, events};
  gpt::QgzSettings settings;
  settings.block = block;
  gpt::qgz_start(context, *g.node, *g.cross, input.data(), chunk, settings, {}, exchange, &finite,
                 Phase::kGradReduce);
  std::vector<float> out(chunk);
  gpt::qgz_finish(context, *g.node, *g.cross, settings, {}, exchange, out.data(), Phase::kGradReduce);
  CHECK(finite);

  // The reference: float64 mean of every rank's chunk r; the bound from each stage's block scales.
  const int r = t.world_rank, j = t.local_rank();
  std::vector<double> mean(chunk, 0), abs_sum(chunk, 0), bound(chunk, 0);
  std::vector<std::vector<float>> all(W, std::vector<float>(chunk));
  for (int source = 0; source < W; ++source) {
    for (int64_t i = 0; i < chunk; ++i) all[source][i] = input_value(source, int64_t(r) * chunk + i);
    for (int64_t i = 0; i < chunk; ++i) {
      mean[i] += double(all[source][i]) / W;
      abs_sum[i] += std::fabs(double(all[source][i]));
    }
    const std::vector<float> s1 = scales_of(all[source].data(), chunk, block);
    for (int64_t i = 0; i < chunk; ++i) bound[i] += s1[i / block] / 2 / W;
  }
  for (int n = 0; n < N; ++n) {
    // Node n's partial sum of chunk r, as stage 1 forms it (sources in local order, fp32), and its scales.
    std::vector<float> partial(chunk, 0.0f);
    for (int source = n * L; source < (n + 1) * L; ++source) {
      std::vector<uint8_t> q(gpt::quant::quantized_bytes(chunk, 4, block));
      gpt::quant::quantize_slice(all[source].data(), chunk, 4, block, q.data());
      gpt::quant::dequantize_add(q.data(), chunk, 4, block, partial.data());
    }
    const std::vector<float> s2 = scales_of(partial.data(), chunk, block);
    for (int64_t i = 0; i < chunk; ++i) bound[i] += s2[i / block] / 2 / W;
  }
  int violations = 0;
  double worst = 0;
  for (int64_t i = 0; i < chunk; ++i) {
    const double allowed = bound[i] + (L + N + 1) * std::ldexp(1.0, -23) * abs_sum[i] / W;
    const double err = std::fabs(double(out[i]) - mean[i]);
    worst = std::max(worst, err / allowed);
    violations += err > allowed ? 1 : 0;
  }
  INFO("rank " << r << " (local " << j << "): worst error / bound " << worst);
  CHECK(violations == 0);
  CHECK(worst > 0.0);  // the quantization really is lossy here
}

TEST_CASE("qwZ: every rank gathers dequant(quant(shard)) bit for bit; with hpZ backward equals forward") {
  const int W = world().size(), L = topology().ranks_per_node;
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const gpt::ParamTable table = gpt::make_param_table(model);
  const gpt::Partition partition(table, W, W);
  std::vector<std::string> names;
  for (const auto& u : table.units) names.push_back(u.name);
  // Each rank's fp16 compute shard: a pure function of (rank, index), so every rank can compute all of them.
  auto shard_of = [&](int rank) {
    std::vector<uint16_t> shard(partition.shard_total());
    for (size_t i = 0; i < shard.size(); ++i)
      shard[i] = gpt::f32_to_f16(input_value(rank + 100, int64_t(i)) * 0.05f);
    return shard;
  };
  const std::vector<uint16_t> mine = shard_of(world().rank());
  for (int h : {1, L}) {
    Groups g = make_groups(h);
    gpt::ZeroConfig config;
    config.stage = 3;
    config.precision = DType::kF16;
    config.quantized_weights = true;
    config.weight_block = 64;
    config.overlap_comm = true;
    gpt::Arena arena;
    gpt::EventLog events(false);
    const gpt::EngineContext context{gpt::cpu_ops(), arena, arena, events};
    gpt::WeightGatherer gatherer(partition, names, world(), h > 1 ? g.hpz.get() : nullptr, config, context);
    std::vector<int> forward, backward;
    for (int u = 0; u < int(names.size()); ++u) forward.push_back(u);
    for (int u = int(names.size()) - 1; u >= 0; --u) backward.push_back(u);
    std::vector<std::vector<float>> seen(names.size());
    gatherer.begin_pass(forward, Phase::kParamGatherFwd, mine.data());
    int mismatched_units = 0;
    for (int u : forward) {
      const gpt::UnitPartition& up = partition.unit(u);
      const auto* w = static_cast<const float*>(gatherer.acquire(u).data);
      std::vector<float> expected(up.padded);
      for (int p = 0; p < W; ++p) {
        const std::vector<uint16_t> shard = shard_of(p);
        std::vector<uint8_t> q(gpt::quant::quantized_bytes(up.shard, 8, 64));
        gpt::quant::quantize_slice(shard.data() + up.shard_offset, gpt::DType::kF16, up.shard, 8, 64,
                                   q.data());
        gpt::quant::dequantize_slice(q.data(), up.shard, 8, 64, expected.data() + p * up.shard,
                                     gpt::DType::kF16);
      }
      mismatched_units += std::memcmp(w, expected.data(), up.numel * sizeof(float)) != 0;
      seen[u].assign(w, w + up.numel);
      gatherer.release(u);
    }
    CHECK(mismatched_units == 0);
    if (h > 1) {
      const size_t held = gatherer.secondary_bytes_held();
      size_t expected_held = 0;  // W/h quantized shards of every unit
      for (int u : forward)
        expected_held += W / h * gpt::quant::quantized_bytes(partition.unit(u).shard, 8, 64);
      CHECK(held == expected_held);
    }
    gatherer.begin_pass(backward, Phase::kParamGatherBwd, mine.data());
    int changed_units = 0;
    for (int u : backward) {
      const auto* w = static_cast<const float*>(gatherer.acquire(u).data);
      changed_units += std::memcmp(w, seen[u].data(), seen[u].size() * sizeof(float)) != 0;
      gatherer.release(u);
    }
    CHECK(changed_units == 0);
  }
}

namespace {

RunSpec zeropp_spec(bool qwz, int h, bool qgz) {
  RunSpec spec;
  spec.zero.stage = 3;
  spec.zero.precision = DType::kF16;
  spec.zero.hidden_dropout = spec.zero.attention_dropout = 0.1;
  spec.zero.reduce_bucket_size = 5000;
  spec.zero.overlap_comm = true;
  spec.zero.quantized_weights = qwz;
  spec.zero.hpz_partition_size = h;
  spec.zero.quantized_gradients = qgz;
  spec.zero.weight_block = 256;
  spec.zero.gradient_block = 128;
  return spec;
}

}  // namespace

TEST_CASE("hpZ alone: losses bitwise equal to ZeRO-3; the secondary holds P/h elements") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const int W = world().size(), L = topology().ranks_per_node;
  for (int h = 2; h <= L; h *= 2) {
    if (L % h) continue;
    for (int accumulation : {1, 3}) {
      for (bool checkpoint : {false, true}) {
        RunSpec plain = zeropp_spec(false, 1, false), hpz = zeropp_spec(false, h, false);
        plain.accumulation = hpz.accumulation = accumulation;
        plain.zero.recompute = hpz.zero.recompute = checkpoint ? gpt::Recompute::full() : gpt::Recompute{};
        const RunResult a = gpt::testing::run(world(), model, plain);
        const RunResult b = gpt::testing::run(world(), model, hpz);
        int different = 0;
        for (size_t s = 0; s < a.steps.size(); ++s) different += a.steps[s].loss != b.steps[s].loss;
        INFO("h " << h << ", accumulation " << accumulation << ", checkpointing " << checkpoint);
        CHECK(different == 0);
        CHECK(a.master == b.master);
        // P/h fp16 elements, P from the model's shape.
        const gpt::ParamTable table = gpt::make_param_table(model);
        int64_t P = 0;
        for (const auto& u : table.units) P += (u.numel + 8 * W - 1) / (8 * W) * (8 * W);
        CHECK(b.hpz_secondary_peak_bytes == size_t(P / h * 2));
      }
    }
  }
}

// zero_hierarchical_allgather moves the same shards by another route (across nodes among the ranks of one
// local index, then inside each node): losses, weights and hpZ's secondaries bit for bit those of the flat
// ring, with raw fp16 and with qwZ shards, hpZ on and off (then the backward's gathers go the new way too),
// and fewer bytes across nodes.
TEST_CASE("the hierarchical weight gather: bit for bit the flat gather's, with fewer cross-node bytes") {
  if (topology().num_nodes() < 2 || topology().ranks_per_node < 2) {
    MESSAGE("needs 2 or more simulated nodes of 2 or more ranks (--ranks-per-node)");
    return;
  }
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  for (bool qwz : {false, true}) {
    for (int h : {1, topology().ranks_per_node}) {
      for (bool checkpoint : {false, true}) {
        RunSpec flat = zeropp_spec(qwz, h, true);
        flat.steps = 4;
        flat.zero.recompute = checkpoint ? gpt::Recompute::full() : gpt::Recompute{};
        RunSpec hierarchical = flat;
        hierarchical.zero.hierarchical_allgather = true;
        const RunResult a = gpt::testing::run(world(), model, flat);
        const RunResult b = gpt::testing::run(world(), model, hierarchical);
        INFO("qwZ " << qwz << ", h " << h << ", checkpointing " << checkpoint);
        for (size_t s = 0; s < a.steps.size(); ++s) CHECK(a.steps[s].loss == b.steps[s].loss);
        CHECK(a.master == b.master);
        CHECK(a.hpz_secondary_peak_bytes == b.hpz_secondary_peak_bytes);
        const gpt::comm::TrafficCounts ta = gpt::comm::sum_over_ranks(world(), a.traffic.back());
        const gpt::comm::TrafficCounts tb = gpt::comm::sum_over_ranks(world(), b.traffic.back());
        CHECK(tb.at(Phase::kParamGatherFwd, Link::kInterNode) <
              ta.at(Phase::kParamGatherFwd, Link::kInterNode));
        CHECK(tb.at(Phase::kGradReduce, Link::kInterNode) == ta.at(Phase::kGradReduce, Link::kInterNode));
      }
    }
  }
}

// stage3_gather_once_per_step keeps each unit's gathered weights from the step's first forward to its
// update: the same weights the re-gathers would bring (with qwZ, hpZ's secondary rebuilds what arrived), so
// losses and weights are bit for bit those of gathering every pass, over 2 accumulated micro-steps, with
// qwZ and hpZ on and off and with checkpointing; the meter sees only the first forward's gathers, equal to
// the closed form.
TEST_CASE("gathering once per step: bit for bit the re-gathering run, one forward's gathers a step") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  for (bool qwz : {false, true}) {
    for (int h : {1, topology().ranks_per_node}) {
      for (bool checkpoint : {false, true}) {
        RunSpec every = zeropp_spec(qwz, h, false);
        every.steps = 3;
        every.zero.recompute = checkpoint ? gpt::Recompute::full() : gpt::Recompute{};
        RunSpec once = every;
        once.zero.gather_once_per_step = true;
        const RunResult a = gpt::testing::run(world(), model, every);
        const RunResult b = gpt::testing::run(world(), model, once);
        INFO("qwZ " << qwz << ", h " << h << ", checkpointing " << checkpoint);
        for (size_t s = 0; s < a.steps.size(); ++s) CHECK(a.steps[s].loss == b.steps[s].loss);
        CHECK(a.master == b.master);
        const gpt::comm::TrafficCounts measured = gpt::comm::sum_over_ranks(world(), b.traffic.back());
        const gpt::Partition partition(gpt::make_param_table(model), world().size(), world().size());
        gpt::TrafficModelInput input;
        input.partition = &partition;
        input.zero = once.zero;
        input.ranks_per_node = topology().ranks_per_node;
        input.accumulation_steps = once.accumulation;
        const gpt::comm::TrafficCounts expected = gpt::expected_step_traffic(input);
        for (Phase phase : {Phase::kParamGatherFwd, Phase::kParamGatherBwd, Phase::kGradReduce}) {
          for (Link link : {Link::kIntraNode, Link::kInterNode}) {
            INFO(gpt::comm::phase_name(phase) << " link " << int(link));
            CHECK(measured.at(phase, link) == expected.at(phase, link));
          }
        }
        CHECK(measured.at(Phase::kParamGatherBwd, Link::kIntraNode) == 0);
      }
    }
  }
}

// gpt_train tells the engine when another step follows (ZeroEngine::NextCall): stage 3 with overlap_comm then
// updates the next forward's first unit before the rest of the shard and posts its gather from the
// optimizer. AdamW is elementwise and the gather carries the same bytes, so losses, gradient norms and
// weights are bit for bit those of gathering at the forward's start, with qwZ, hpZ, qgZ, the hierarchical
// gather and gathering once per step on and off, and the run moves the same bytes by phase and link.
TEST_CASE("the next forward's first gather from the optimizer: bit for bit, the same bytes over the run") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const bool nodes = topology().num_nodes() >= 2 && topology().ranks_per_node >= 2;
  for (bool zeropp : {false, true}) {
    for (bool hierarchical : {false, true}) {
      for (bool once : {false, true}) {
        if (hierarchical && !nodes) continue;
        RunSpec plain = zeropp_spec(zeropp, zeropp ? topology().ranks_per_node : 1, zeropp);
        plain.steps = 3;
        plain.zero.hierarchical_allgather = hierarchical;
        plain.zero.gather_once_per_step = once;
        plain.zero.record_events = true;
        RunSpec ahead = plain;
        ahead.gather_ahead = true;
        const RunResult a = gpt::testing::run(world(), model, plain);
        const RunResult b = gpt::testing::run(world(), model, ahead);
        INFO("ZeRO++ " << zeropp << ", hierarchical " << hierarchical << ", once per step " << once);
        for (size_t s = 0; s < a.steps.size(); ++s) {
          CHECK(a.steps[s].loss == b.steps[s].loss);
          CHECK(a.steps[s].grad_norm == b.steps[s].grad_norm);
        }
        CHECK(a.master == b.master);
        gpt::comm::TrafficCounts ta, tb;
        for (size_t s = 0; s < a.traffic.size(); ++s) ta += a.traffic[s], tb += b.traffic[s];
        for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
          for (Link link : {Link::kIntraNode, Link::kInterNode}) {
            CHECK(ta.at(Phase(p), link) == tb.at(Phase(p), link));
          }
        }
        // The gather begun ahead is complete when its step returns: the meter counts it there, so the
        // first step carries one more first-unit gather, the last one fewer, and the others are unchanged.
        auto forward_bytes = [](const gpt::comm::TrafficCounts& t) {
          return t.at(Phase::kParamGatherFwd, Link::kIntraNode) +
                 t.at(Phase::kParamGatherFwd, Link::kInterNode);
        };
        CHECK(forward_bytes(b.traffic.front()) > forward_bytes(a.traffic.front()));
        CHECK(forward_bytes(b.traffic.back()) < forward_bytes(a.traffic.back()));
        for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
          for (Link link : {Link::kIntraNode, Link::kInterNode}) {
            CHECK(a.traffic[1].at(Phase(p), link) == b.traffic[1].at(Phase(p), link));
          }
        }
        // The last step's forward found its first gather posted by the step before (the events are the
        // last step's).
        auto forward_posts = [](const RunResult& r) {
          std::vector<std::string> units;
          for (const gpt::EngineEvent& e : r.events) {
            if (e.kind == gpt::EngineEvent::Kind::kPostGather && !e.backward) units.push_back(e.what);
          }
          return units;
        };
        const std::vector<std::string> posted = forward_posts(a);
        REQUIRE(!posted.empty());
        CHECK(std::vector<std::string>(posted.begin() + 1, posted.end()) == forward_posts(b));
      }
    }
  }
}

// A pass begun ahead that the next call does not take up is waited for and dropped: an evaluation (another
// phase), or a weight import (the gather carries the old weights). Both give the results of an engine that
// never gathered ahead.
TEST_CASE("a gather begun ahead is dropped by an evaluation or a weight import, with the same results") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  RunSpec spec = zeropp_spec(true, topology().ranks_per_node, true);
  spec.zero.hierarchical_allgather = topology().num_nodes() >= 2 && topology().ranks_per_node >= 2;
  gpt::TrainBatches batches(gpt::testing::synthetic_shard(model), model.vocab, model.seq_len,
                            spec.micro_batch, spec.accumulation, world(), spec.seed);
  auto after_one_step = [&](bool ahead) {
    gpt::ZeroEngine engine(model, spec.zero, spec.micro_batch, world(), spec.seed);
    const auto next = ahead ? gpt::ZeroEngine::NextCall::kTrainStep : gpt::ZeroEngine::NextCall::kUnknown;
    engine.train_step(batches.at(0), spec.lr, false, next);
    std::vector<double> seen = {engine.evaluate(batches.at(1).front())};
    engine.train_step(batches.at(1), spec.lr, false, next);
    const std::vector<float> whole = engine.gather_master();
    engine.load_model_weights(whole.data());
    seen.push_back(engine.train_step(batches.at(2), spec.lr).loss);
    seen.push_back(engine.evaluate(batches.at(3).front()));
    return seen;
  };
  CHECK(after_one_step(false) == after_one_step(true));
}

TEST_CASE("an inf in one rank's gradient with qgZ on makes every rank skip the step") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  RunSpec spec = zeropp_spec(true, topology().ranks_per_node, true);
  spec.steps = 4;
  spec.accumulation = 1;
  int backward_count = 0;
  const bool poisoner = world().rank() == world().size() - 1;
  spec.hook = [&](int unit, float* grad, int64_t) {
    if (unit != gpt::BlockUnits::of(1, 1).first) return;
    if (++backward_count == 3 && poisoner) grad[1] = std::numeric_limits<float>::quiet_NaN();
  };
  const RunResult r = gpt::testing::run(world(), model, spec);
  for (int s = 0; s < 4; ++s) CHECK(r.steps[s].skipped == (s == 2));
}

namespace {

// Closed forms of issue 5, derived here from the model's shape (fp16, b = 2).
struct Expected {
  uint64_t intra[3] = {0, 0, 0}, inter[3] = {0, 0, 0};  // fwd gather, bwd gather, grad reduce
};

Expected closed_forms(const gpt::GPTConfig& m, const RunSpec& spec, int W, int L) {
  const int N = W / L, k = spec.accumulation, h = spec.zero.hpz_partition_size;
  const int64_t C = m.hidden, align = 8LL * W;
  std::vector<int64_t> n = {int64_t(m.padded_vocab()) * C, int64_t(m.max_positions) * C};
  for (int l = 0; l < m.num_layers; ++l) n.push_back(12 * C * C + 13 * C);
  n.push_back(2 * C);
  std::vector<int64_t> padded;
  for (int64_t x : n) padded.push_back((x + align - 1) / align * align);
  const int U = int(n.size());
  auto quantized = [](int64_t s, int bits, int block) {
    return uint64_t(bits == 8 ? s : s / 2) + 4 * uint64_t((s + block - 1) / block);
  };
  auto per_rank = [&](int u) {  // one rank's shard on the wire
    const int64_t s = padded[u] / W;
    return spec.zero.quantized_weights ? quantized(s, 8, spec.zero.weight_block) : uint64_t(s) * 2;
  };
  Expected e;
  auto ring = [&](int phase, uint64_t c, int ranks, int nodes) {
    const uint64_t total = uint64_t(ranks) * (ranks - 1) * c,
                   inter = nodes >= 2 ? uint64_t(nodes) * (ranks - 1) * c : 0;
    e.inter[phase] += inter;
    e.intra[phase] += total - inter;
  };
  for (int m_step = 0; m_step < k; ++m_step) {
    for (int u = 0; u < U; ++u) {
      if (h > 1 && m_step > 0) {
        for (int g = 0; g < W / h; ++g) ring(0, uint64_t(W / h) * per_rank(u), h, 1);
      } else {
        ring(0, per_rank(u), W, N);
      }
      if (u == 1) continue;  // wpe is not gathered for backward
      if (h > 1) {
        for (int g = 0; g < W / h; ++g) ring(1, uint64_t(W / h) * per_rank(u), h, 1);
      } else {
        ring(1, per_rank(u), W, N);
      }
    }
    // Buckets: whole units in backward order, closed before a unit that would pass reduce_bucket_size.
    std::vector<std::vector<int>> buckets;
    int64_t filled = 0;
    for (int u = U - 1; u >= 0; --u) {
      if (buckets.empty() || filled + n[u] > spec.zero.reduce_bucket_size) buckets.emplace_back(), filled = 0;
      buckets.back().push_back(u);
      filled += n[u];
    }
    for (const auto& bucket : buckets) {
      int64_t E = 0;
      for (int u : bucket) E += padded[u];
      if (spec.zero.quantized_gradients) {
        // Inside the node at zeropp_intra_node_gradient_bits, across nodes in int4.
        const uint64_t q1 = quantized(E / W, spec.zero.intra_node_gradient_bits, spec.zero.gradient_block);
        const uint64_t q2 = quantized(E / W, 4, spec.zero.gradient_block);
        e.intra[2] += uint64_t(W) * (L - 1) * N * q1;
        e.inter[2] += uint64_t(W) * (N - 1) * q2;
      } else {
        ring(2, uint64_t(E / W) * 2, W, N);
      }
    }
  }
  return e;
}

}  // namespace

TEST_CASE(
    "traffic of ZeRO-3, qwZ, hpZ, qgZ, all three, with int8 intra-node gradients and with LoCo equals the "
    "closed forms; ZeRO++ crosses nodes 4x less") {
  const int W = world().size(), L = topology().ranks_per_node, N = topology().num_nodes();
  if (N < 2) {
    MESSAGE("one node: the closed forms are for two or more nodes");
    return;
  }
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  struct Config {
    const char* name;
    bool qwz;
    int h;
    bool qgz;
    int intra_bits = 4;
    bool loco = false;
  };
  const Config configs[] = {{"zero3", false, 1, false},
                            {"qwz", true, 1, false},
                            {"hpz", false, L, false},
                            {"qgz", false, 1, true},
                            {"zeropp", true, L, true},
                            {"zeropp_int8intra", true, L, true, 8},
                            {"zeropp_loco", true, L, true, 4, true}};
  for (int accumulation : {1, 2}) {
    uint64_t zero3_inter = 0, zeropp_inter = 0;
    for (const Config& c : configs) {
      RunSpec spec = zeropp_spec(c.qwz, c.h, c.qgz);
      spec.zero.intra_node_gradient_bits = c.intra_bits;
      spec.zero.loco = c.loco;
      spec.steps = 2;
      spec.accumulation = accumulation;
      const RunResult r = gpt::testing::run(world(), model, spec);
      const gpt::comm::TrafficCounts t = gpt::comm::sum_over_ranks(world(), r.traffic.back());
      const Expected e = closed_forms(model, spec, W, L);
      const Phase phases[3] = {Phase::kParamGatherFwd, Phase::kParamGatherBwd, Phase::kGradReduce};
      INFO(c.name << ", accumulation " << accumulation << ": " << t.describe());
      for (int p = 0; p < 3; ++p) {
        CHECK(t.at(phases[p], Link::kIntraNode) == e.intra[p]);
        CHECK(t.at(phases[p], Link::kInterNode) == e.inter[p]);
      }
      uint64_t inter = 0;
      for (Phase p : phases) inter += t.at(p, Link::kInterNode);
      if (std::string(c.name) == "zero3") zero3_inter = inter;
      if (std::string(c.name) == "zeropp") zeropp_inter = inter;
    }
    const double ratio = double(zeropp_inter) / double(zero3_inter);
    if (world().rank() == 0) {
      std::printf("%d nodes x %d: cross-node bytes per step, ZeRO++ / ZeRO-3 = %.4f (accumulation %d)\n", N,
                  L, ratio, accumulation);
    }
    CHECK(ratio <= 0.25);
  }
}

namespace {

namespace ref = gpt::quant::testing;

// One qgZ reduction of every rank, simulated with the float64 reference (tests/quant/reference.h), with or
// without LoCo: each rank's kept errors of hop 1 (per destination rank) and hop 2 (per node), and each rank's
// output chunk. The order of the fp32 sums is qgz_finish's: sources in local order, nodes in order, from 0.
struct QgzReference {
  int W, L, N, block, intra_bits;
  float beta;
  bool feedback;
  int64_t chunk;
  std::vector<std::vector<ref::Decoded>> intra, cross;  // [rank][destination], [rank][node]

  QgzReference(int W_, int L_, int block_, int bits, float beta_, bool feedback_, int64_t chunk_)
      : W(W_),
        L(L_),
        N(W_ / L_),
        block(block_),
        intra_bits(bits),
        beta(beta_),
        feedback(feedback_),
        chunk(chunk_),
        intra(W_, std::vector<ref::Decoded>(W_)),
        cross(W_, std::vector<ref::Decoded>(W_ / L_)) {}

  ref::Decoded hop(const float* x, int bits, ref::Decoded& kept) const {
    return feedback ? ref::reference_feedback_hop(x, chunk, bits, block, beta, kept)
                    : ref::reference_quantize(x, chunk, bits, block);
  }
  // inputs[rank]: W chunks; returns every rank's output chunk.
  std::vector<std::vector<float>> reduce(const std::vector<std::vector<float>>& inputs) {
    auto fl = [](double v) { return float(v); };
    std::vector<std::vector<ref::Decoded>> wire1(W, std::vector<ref::Decoded>(W));
    for (int s = 0; s < W; ++s)
      for (int d = 0; d < W; ++d) wire1[s][d] = hop(&inputs[s][size_t(d) * chunk], intra_bits, intra[s][d]);
    std::vector<std::vector<ref::Decoded>> wire2(W, std::vector<ref::Decoded>(N));
    for (int r = 0; r < W; ++r) {
      const int n = r / L, j = r % L;
      for (int m = 0; m < N; ++m) {
        std::vector<float> partial(chunk, 0.0f);
        for (int s = n * L; s < (n + 1) * L; ++s)
          for (int64_t i = 0; i < chunk; ++i)
            partial[i] = fl(double(partial[i]) + ref::reference_dequantized(wire1[s][m * L + j], i, block));
        wire2[r][m] = hop(partial.data(), 4, cross[r][m]);
      }
    }
    std::vector<std::vector<float>> out(W, std::vector<float>(chunk, 0.0f));
    for (int r = 0; r < W; ++r) {
      for (int n = 0; n < N; ++n)
        for (int64_t i = 0; i < chunk; ++i)
          out[r][i] =
              fl(double(out[r][i]) + ref::reference_dequantized(wire2[n * L + r % L][r / L], i, block));
      for (int64_t i = 0; i < chunk; ++i) out[r][i] = fl(double(out[r][i]) / W);
    }
    return out;
  }
};

// qgZ on this rank's groups, with its kept errors in host memory (the CPU backend's device).
struct QgzRun {
  Groups groups = make_groups(1);
  gpt::QgzSettings settings;
  std::vector<uint8_t> intra, cross;
  gpt::Arena arena;
  gpt::EventLog events{false};
  gpt::EngineContext context{gpt::cpu_ops(), arena, arena, events};
  int64_t chunk;

  QgzRun(int64_t chunk_, int block, int bits, bool feedback) : chunk(chunk_) {
    settings.block = block;
    settings.intra_bits = bits;
    settings.feedback = feedback;
    settings.err_beta = 0.8f;
    intra.assign(gpt::qgz_intra_feedback_bytes(chunk, world().size(), block), 0);
    cross.assign(gpt::qgz_cross_feedback_bytes(chunk, topology().num_nodes(), block), 0);
  }
  std::vector<float> reduce(const std::vector<float>& input) {
    const gpt::QgzFeedback kept =
        settings.feedback ? gpt::QgzFeedback{intra.data(), cross.data()} : gpt::QgzFeedback{};
    gpt::QgzExchange exchange;
    bool finite = false;
    gpt::qgz_start(context, *groups.node, *groups.cross, input.data(), chunk, settings, kept, exchange,
                   &finite, Phase::kGradReduce);
    std::vector<float> out(chunk);
    gpt::qgz_finish(context, *groups.node, *groups.cross, settings, kept, exchange, out.data(),
                    Phase::kGradReduce);
    return out;
  }
};

// Every rank's input of reduction `step`: W chunks of off-grid values (a pure function of rank, step, index).
std::vector<std::vector<float>> step_inputs(int W, int64_t chunk, int step) {
  std::vector<std::vector<float>> inputs(W, std::vector<float>(size_t(W) * chunk));
  for (int s = 0; s < W; ++s)
    for (int64_t i = 0; i < W * chunk; ++i) inputs[s][i] = input_value(s + 16 * step, i);
  return inputs;
}

}  // namespace

TEST_CASE("qgZ with LoCo: three reductions equal the float64 recurrence, outputs and kept errors") {
  const int W = world().size(), L = topology().ranks_per_node, r = world().rank();
  if (topology().num_nodes() < 2) return;
  const int block = 64;
  const int64_t chunk = 200;  // a short last block
  for (int bits : {4, 8}) {
    CAPTURE(bits);
    QgzRun run(chunk, block, bits, true);
    QgzReference reference(W, L, block, bits, 0.8f, true, chunk);
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const std::vector<std::vector<float>> inputs = step_inputs(W, chunk, step);
      const std::vector<float> out = run.reduce(inputs[r]);
      const std::vector<float> expected = reference.reduce(inputs)[r];
      CHECK(std::memcmp(out.data(), expected.data(), chunk * sizeof(float)) == 0);
      std::vector<uint8_t> intra, cross;
      for (const ref::Decoded& kept : reference.intra[r]) {
        const std::vector<uint8_t> bytes = ref::encode_slice(kept, 8);
        intra.insert(intra.end(), bytes.begin(), bytes.end());
      }
      for (const ref::Decoded& kept : reference.cross[r]) {
        const std::vector<uint8_t> bytes = ref::encode_slice(kept, 8);
        cross.insert(cross.end(), bytes.begin(), bytes.end());
      }
      CHECK(intra == run.intra);
      CHECK(cross == run.cross);
    }
  }
}

TEST_CASE("qgZ with LoCo on grid values: outputs equal plain qgZ's and the input, no error is kept") {
  const int W = world().size(), L = topology().ranks_per_node;
  if (topology().num_nodes() < 2) return;
  const int block = 32;
  const int64_t chunk = 80;
  // Every rank sends the same multiples of 2^-4 with +-7 at each block's start: exact in int4 on both hops
  // (the partial sums are L times the values, with scale L 2^-4).
  std::vector<float> input(size_t(W) * chunk);
  for (int64_t i = 0; i < W * chunk; ++i) {
    const int64_t at = i % chunk;
    input[i] = std::ldexp(float(at % block == 0 ? (i % 2 ? 7 : -7) : int(at * 5 % 15) - 7), -4);
  }
  QgzRun plain(chunk, block, 4, false), loco(chunk, block, 4, true);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> a = plain.reduce(input), b = loco.reduce(input);
    CHECK(std::memcmp(a.data(), b.data(), chunk * sizeof(float)) == 0);
    CHECK(std::memcmp(b.data(), input.data() + size_t(world().rank()) * chunk, chunk * sizeof(float)) == 0);
  }
  std::vector<float> intra(size_t(W) * chunk), cross(size_t(W / L) * chunk);
  gpt::quant::dequantize_slices(loco.intra.data(), chunk, W, 8, block, intra.data());
  gpt::quant::dequantize_slices(loco.cross.data(), chunk, W / L, 8, block, cross.data());
  CHECK(std::all_of(intra.begin(), intra.end(), [](float e) { return e == 0.0f; }));
  CHECK(std::all_of(cross.begin(), cross.end(), [](float e) { return e == 0.0f; }));
}

TEST_CASE(
    "qgZ with LoCo: the accumulated output tracks the true sum with a bounded error; plain qgZ drifts") {
  const int W = world().size(), r = world().rank();
  if (topology().num_nodes() < 2) return;
  const int block = 64;
  const int64_t chunk = 256;
  const int steps = 400;
  // A gradient with a steady part and noise: x = bias + 0.1 noise, both off the grid.
  auto input_of = [&](int rank, int step) {
    std::vector<float> x(size_t(W) * chunk);
    for (int64_t i = 0; i < W * chunk; ++i)
      x[i] = input_value(rank, i) + 0.1f * input_value(rank + 1000 + 16 * step, i);
    return x;
  };
  QgzRun plain(chunk, block, 4, false), loco(chunk, block, 4, true);
  std::vector<double> truth(chunk, 0), sum_plain(chunk, 0), sum_loco(chunk, 0);
  std::vector<double> drift_plain, drift_loco;  // max |accumulated error| after each step
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> inputs;
    for (int s = 0; s < W; ++s) inputs.push_back(input_of(s, step));
    for (int s = 0; s < W; ++s)
      for (int64_t i = 0; i < chunk; ++i) truth[i] += double(inputs[s][size_t(r) * chunk + i]) / W;
    const std::vector<float> a = plain.reduce(inputs[r]), b = loco.reduce(inputs[r]);
    double worst_plain = 0, worst_loco = 0;
    for (int64_t i = 0; i < chunk; ++i) {
      sum_plain[i] += a[i];
      sum_loco[i] += b[i];
      worst_plain = std::max(worst_plain, std::fabs(sum_plain[i] - truth[i]));
      worst_loco = std::max(worst_loco, std::fabs(sum_loco[i] - truth[i]));
    }
    drift_plain.push_back(worst_plain);
    drift_loco.push_back(worst_loco);
  }
  auto max_over = [](const std::vector<double>& v, int from, int to) {
    return *std::max_element(v.begin() + from, v.begin() + to);
  };
  // Early: steps 40-80, once the kept errors have filled (they start at zero); late: the second half.
  const double loco_early = max_over(drift_loco, steps / 10, steps / 5),
               loco_late = max_over(drift_loco, steps / 2, steps);
  const double plain_early = max_over(drift_plain, steps / 10, steps / 5), plain_late = drift_plain.back();
  INFO("rank " << r << ": accumulated error, LoCo " << loco_early << " (steps 40-80) -> " << loco_late
               << " (second half); plain qgZ " << plain_early << " -> " << plain_late);
  if (r == 0) {
    std::printf(
        "accumulated error over %d steps: LoCo %.4g (steps 40-80) -> %.4g (second half); plain %.4g -> "
        "%.4g\n",
        steps, loco_early, loco_late, plain_early, plain_late);
  }
  // Deterministic inputs on one thread: the same numbers every run. Five times the steps: a random walk grows
  // by sqrt(5) ~ 2.2 (plain qgZ, with its steady part on top); LoCo's error is (e_0 - e_k) / (1 - beta) per
  // hop plus the int8 store's rounding, so only the larger window's maximum lifts it a little.
  CHECK(loco_late <= 2 * loco_early);      // bounded: no growth with k
  CHECK(plain_late >= 2.5 * plain_early);  // grows
  CHECK(loco_late * 6 <= plain_late);
}

TEST_CASE("LoCo in the engine: its memory line, a reset every reset_T steps and after a skipped step") {
  if (topology().num_nodes() < 2) return;
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  RunSpec spec = zeropp_spec(true, topology().ranks_per_node, true);
  spec.zero.loco = true;
  spec.zero.loco_reset_T = 3;
  spec.accumulation = 1;
  spec.steps = 1;
  gpt::ZeroEngine engine(model, spec.zero, spec.micro_batch, world(), spec.seed);
  bool found = false;
  for (const auto& line : engine.memory()) {
    if (line.state != "qgZ error feedback") continue;
    found = true;
    CHECK(line.formula_bytes == double(engine.feedback_bytes()));
    CHECK(line.bytes >= engine.feedback_bytes());  // the arena's measure, with its allocation rounding
    CHECK(line.bytes <= engine.feedback_bytes() + 4096);
  }
  CHECK(found);
  auto all_zero = [&] {
    const std::vector<uint8_t> kept = engine.feedback_state();
    return std::all_of(kept.begin(), kept.end(), [](uint8_t b) { return b == 0; });
  };
  bool poison = false;
  engine.set_gradient_hook([&](int, float* grad, int64_t) {
    if (poison && world().rank() == 0) grad[0] = std::numeric_limits<float>::infinity();
  });
  // Applied steps 1, 2 keep errors; step 3 is a multiple of reset_T: zeroed; 4 keeps again; a skipped step
  // zeroes them.
  const bool expect_zero[] = {false, false, true, false};
  for (bool zero : expect_zero) {
    gpt::testing::train_steps(engine, world(), model, spec);
    CHECK(all_zero() == zero);
  }
  poison = true;
  gpt::testing::train_steps(engine, world(), model, spec);
  CHECK(engine.applied_steps() == 4);
  CHECK(all_zero());
}

TEST_CASE(
    "qgZ's bucket reduction: buckets of one unit reduced in place from the unit's gradient and packed "
    "buckets both equal qgZ of the rank-major bucket, bit for bit, and no gradient is read after add") {
  const int W = world().size();
  if (topology().num_nodes() < 2) return;  // qgZ runs on two or more nodes
  const gpt::ParamTable table = gpt::make_param_table(gpt::testing::tiny_model());
  const gpt::Partition partition(table, W, W);
  const int U = int(partition.units().size());
  std::vector<int> order(U);
  for (int u = 0; u < U; ++u) order[u] = U - 1 - u;
  std::vector<std::string> names;
  for (const gpt::UnitInfo& unit : table.units) names.push_back(unit.name);
  // Buckets of one block and ln_f: {ln_f, h.1} packed, {h.0} in place, {wpe, wte} packed.
  const int64_t bucket_size = partition.unit(U - 2).numel + partition.unit(U - 1).numel;
  const std::vector<std::vector<int>> buckets = gpt::plan_buckets(partition, order, bucket_size);
  REQUIRE(buckets == std::vector<std::vector<int>>{{4, 3}, {2}, {1, 0}});
  // Each unit's gradient as the loop hands it over: numel values, then zeros up to the padded size.
  std::vector<std::vector<float>> grads(U);
  for (int u = 0; u < U; ++u) {
    grads[u].assign(size_t(partition.unit(u).padded), 0.0f);
    for (int64_t i = 0; i < partition.unit(u).numel; ++i)
      grads[u][i] = input_value(world().rank() + 8 * u, i);
  }
  QgzRun reference(1, 128, 4, false);
  std::vector<float> expected(size_t(partition.shard_total()), 0.0f);
  for (const std::vector<int>& bucket : buckets) {
    int64_t chunk = 0;
    for (int u : bucket) chunk += partition.unit(u).shard;
    std::vector<float> packed(size_t(W) * chunk, 0.0f);  // rank p's part: shard p of each unit in turn
    for (int p = 0, at = 0; p < W; ++p) {
      for (int u : bucket) {
        const int64_t shard = partition.unit(u).shard;
        std::copy_n(grads[u].begin() + p * shard, shard, packed.begin() + at);
        at += int(shard);
      }
    }
    reference.chunk = chunk;
    const std::vector<float> mean = reference.reduce(packed);
    int64_t at = 0;
    for (int u : bucket) {
      const gpt::UnitPartition& unit = partition.unit(u);
      for (int64_t i = 0; i < unit.shard; ++i) expected[unit.shard_offset + i] += mean[at + i];
      at += unit.shard;
    }
  }
  Groups groups = make_groups(1);
  gpt::Arena arena;
  gpt::EventLog events{false};
  const gpt::EngineContext context{gpt::cpu_ops(), arena, arena, events};
  std::vector<float> shard(size_t(partition.shard_total()), 0.0f);
  gpt::QgzGroups qgz{groups.node.get(), groups.cross.get(), reference.settings};
  gpt::GradientReducer reducer(partition, names, {order}, world(), DType::kF16, bucket_size, true,
                               shard.data(), context, &qgz);
  REQUIRE(reducer.buckets() == buckets);
  for (int u : order) {
    std::vector<float> handed = grads[u];
    reducer.add(u, handed.data());
    std::fill(handed.begin(), handed.end(), std::numeric_limits<float>::quiet_NaN());  // reused at once
  }
  reducer.finish();
  CHECK(std::memcmp(shard.data(), expected.data(), shard.size() * sizeof(float)) == 0);
}
