// The planner on the ZeRO++ tutorial's 18B model (40 layers, hidden 6144, 32 heads, sequence 512,
// micro-batch 1, 4 nodes x 16 GPUs, fp16, stage 3, reduce_bucket_size 1e7, qwZ, hpZ 16, qgZ, overlap_comm,
// activation checkpointing): the parameter count and the ZeRO memory formulas computed here independently,
// the report and its JSON line, and the process's peak memory while planning (the acceptance bound is
// 200 MB). Also: activation counts against the model's own buffers, a cluster where hpZ 16 cannot run; with
// tensor parallelism (t = 2, 4) the slice's model states, ZeRO's and the tensor-parallel bytes per step and
// the activations per rank, each against an independent count or the closed form it is planned from, and the
// sweep over t = 1, 2, 4, 8.
#include "train/planner.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/user_error.h"
#include "kernels/attention_residual.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/layers.h"
#include "model/loop.h"
#include "model/params.h"
#include "tests/sanitized_build.h"
#include "train/activation_formulas.h"
#include "zero/engine.h"
#include "zero/partition.h"
#include "zero/tensor_parallel_traffic.h"
#include "zero/traffic_model.h"

namespace {

gpt::TrainOptions tutorial() {
  gpt::TrainOptions o;
  o.model.num_layers = 40;
  o.model.hidden = 6144;
  o.model.heads = 32;
  o.model.seq_len = 512;
  o.model.max_positions = 1024;
  o.model.vocab = 50257;
  o.micro_batch = 1;
  o.accumulation_steps = 1;
  o.global_batch = 64;
  o.zero.stage = 3;
  o.zero.precision = gpt::DType::kF16;
  o.zero.reduce_bucket_size = 10'000'000;
  o.zero.overlap_comm = true;
  o.zero.recompute = gpt::Recompute::full();
  o.zero.quantized_weights = true;
  o.zero.hpz_partition_size = 16;
  o.zero.quantized_gradients = true;
  o.plan.enabled = true;
  o.plan.nodes = 4;
  o.plan.gpus_per_node = 16;
  o.plan.gpu_memory_bytes = 32e9;
  o.plan.intra_node_bytes_per_s = 150e9;
  o.plan.inter_node_bytes_per_s = 100e9 / 8;
  o.plan.gpu_tflops = 125;
  return o;
}

// Peak resident set of this process (VmHWM), in bytes.
double peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024;
  }
  return -1;
}

nlohmann::json last_json_line(const std::string& report) {
  const size_t end = report.find_last_not_of('\n');
  const size_t begin = report.rfind('\n', end);
  return nlohmann::json::parse(report.substr(begin + 1, end - begin));
}

// Elements of each unit of GPT-2, written out here from the architecture (not from model/params).
struct Units {
  int64_t wte, wpe, block, ln_f, layers;
};
Units units_of(const gpt::GPTConfig& m) {
  const int64_t C = m.hidden, Vp = (m.vocab + 127) / 128 * 128;
  return {Vp * C, int64_t(m.max_positions) * C, 12 * C * C + 13 * C, 2 * C, m.num_layers};
}
int64_t padded(int64_t n, int world) {
  return (n + 8 * world - 1) / (8 * world) * (8 * world);
}

}  // namespace

TEST_CASE("the tutorial's 18B model: parameters, ZeRO memory formulas, the JSON line, peak memory < 200 MB") {
  const gpt::TrainOptions o = tutorial();
  const std::string report = gpt::plan_report(o);
  const double peak = peak_rss_bytes();
  std::printf("%s", report.c_str());
  std::printf("peak resident memory while planning: %.1f MB\n", peak / 1e6);
  CHECK(peak > 0);
  // Under a sanitizer the process's RSS is the sanitizer's (ASan's shadow and its quarantine of the dry runs'
  // freed blocks), not the planner's: the bound holds for the optimized build.
  if (!gpt::test::kSanitizedBuild) CHECK(peak < 200e6);

  const Units u = units_of(o.model);
  const int64_t N = u.wte + u.layers * u.block + u.ln_f;  // 6N's N: no position table
  CHECK(N == 18'431'668'224);
  const int W = 64;
  const int64_t P = padded(u.wte, W) + padded(u.wpe, W) + u.layers * padded(u.block, W) + padded(u.ln_f, W);

  const gpt::Plan plan = gpt::make_plan(o);
  CHECK(plan.params_for_flops == N);
  CHECK(plan.params == N + u.wpe);
  CHECK(plan.params / 1e9 == doctest::Approx(18.44).epsilon(0.001));
  CHECK(plan.padded_params == P);
  // Full recomputation repeats every block's forward: 24 C^2 + 4 C T per layer and token.
  CHECK(plan.flops_per_token ==
        doctest::Approx(6.0 * N + 12.0 * 40 * 6144 * 512 + 40 * (24.0 * 6144 * 6144 + 4.0 * 6144 * 512)));
  REQUIRE(plan.variants.size() == 8);
  const gpt::PlanVariant& v = plan.variants[plan.configured];
  CHECK(v.name == "zeropp");
  CHECK(v.configured);
  CHECK(v.problem.empty());

  const gpt::PlanMemory& m = v.memory;
  CHECK(m.of("compute weights") == 2.0 * P / W);
  CHECK(m.of("master") == 4.0 * P / W);
  CHECK(m.of("moments") == 8.0 * P / W);
  CHECK(m.of("gradients") == 4.0 * P / W);
  // hpZ with qwZ: each rank keeps W/h = 4 int8 shards of every unit, with one fp32 scale per 2048 values.
  auto secondary = [&](int64_t unit) {
    const int64_t shard = padded(unit, W) / W;
    return double(shard + 4 * ((shard + 2047) / 2048)) * 4;
  };
  CHECK(m.of("hpZ secondary") ==
        secondary(u.wte) + secondary(u.wpe) + 40 * secondary(u.block) + secondary(u.ln_f));
  CHECK(m.of("hpZ secondary") == doctest::Approx((1 + 4.0 / 2048) * P / 16).epsilon(1e-6));
  // Activations in fp16 (the half layer loop): 41 block inputs of B T C, one block's saved tensors, the
  // recomputed output, the backward scratch, the head (logits over 50304 columns) and the residual gradient;
  // the statistics (LayerNorm's, the log-sum-exp, the losses) in fp32.
  const double BTC = 512.0 * 6144, BT = 512;
  // The attention residual as CudaOps keeps it: 32 heads' probabilities (fp16), or one log-sum-exp per row
  // (fp32).
  const bool lse = gpt::cuda_attention_residual() == gpt::AttentionResidual::kLogSumExp;
  const double one_block = 15 * BTC + (lse ? 0 : 32.0 * 512 * 512),
               one_block_statistics = 4 * BT + (lse ? 32.0 * 512 : 0);
  const double rest = 14 * BTC + (2 * BTC + BT * 50304) + BTC, rest_statistics = 4 * BT;
  CHECK(m.activations_checkpointed ==
        2 * (41 * BTC + one_block + BTC + rest) + 4 * (one_block_statistics + rest_statistics));
  CHECK(m.activations_full ==
        2 * (41 * BTC + 40 * one_block + rest) + 4 * (40 * one_block_statistics + rest_statistics));
  CHECK(m.of("activations") == m.activations_checkpointed);
  double sum = 0;
  for (const auto& line : m.states) sum += line.bytes;
  CHECK(m.total == sum);
  CHECK(m.total < 32e9);  // the tutorial's configuration fits a 32 GB V100

  const nlohmann::json j = last_json_line(report);
  const nlohmann::json& jp = j.at("plan");
  CHECK(jp.at("configured") == "zeropp");
  CHECK(jp.at("model").at("params").get<int64_t>() == N + u.wpe);
  CHECK(jp.at("memory").at("master").get<double>() == 4.0 * P / W);
  CHECK(jp.at("memory").at("fits").get<bool>());
  CHECK(jp.at("memory").at("hpz_secondary").get<double>() == m.of("hpZ secondary"));
  CHECK(jp.at("memory").at("activations_without_checkpointing").get<double>() == m.activations_full);
  CHECK(jp.at("variants").size() == 8);
  for (size_t i = 0; i < plan.variants.size(); ++i) {
    const auto& jv = jp.at("variants")[i];
    CHECK(jv.at("name") == plan.variants[i].name);
    const uint64_t inter = jv.at("bytes").at("grad_reduce").at("inter").get<uint64_t>();
    CHECK(inter == plan.variants[i].traffic.at(gpt::comm::Phase::kGradReduce, gpt::comm::Link::kInterNode));
  }

  // ZeRO++'s point: on 4 nodes it moves well under a third of ZeRO-3's cross-node bytes and, on a 100 Gb/s
  // network, runs faster.
  auto inter_total = [](const gpt::PlanVariant& x) { return x.traffic.total(gpt::comm::Link::kInterNode); };
  const gpt::PlanVariant& zero3 = plan.variants[0];
  CHECK(zero3.name == "zero3");
  CHECK(double(inter_total(v)) < 0.3 * double(inter_total(zero3)));
  CHECK(v.timing.tokens_per_s > zero3.timing.tokens_per_s);
  CHECK(v.timing.step > 0);
}

TEST_CASE("hpZ 16 on 8 GPUs per node is reported, not planned; the other combinations use h = 8") {
  gpt::TrainOptions o = tutorial();
  o.plan.nodes = 8;
  o.plan.gpus_per_node = 8;
  const gpt::Plan plan = gpt::make_plan(o);
  const gpt::PlanVariant& v = plan.variants[plan.configured];
  CHECK(v.name == "zeropp");
  CHECK(v.problem.find("zero_hpz_partition_size 16 does not divide the 8 ranks per node") == 0);
  CHECK(v.traffic.total() == 0);
  o.zero.hpz_partition_size = 1;
  o.zero.quantized_weights = o.zero.quantized_gradients = false;
  const gpt::Plan zero3 = gpt::make_plan(o);
  CHECK(zero3.variants[zero3.configured].name == "zero3");
  for (const auto& x : zero3.variants) {
    CHECK(x.problem.empty());
    if (x.name.find("hpz") != std::string::npos || x.name == "zeropp") CHECK(x.zero.hpz_partition_size == 8);
  }
  CHECK(gpt::plan_report(o).find("DOES NOT FIT") == std::string::npos);
}

TEST_CASE("a configured stage below 3 is planned as itself, beside the stage 3 combinations") {
  gpt::TrainOptions o = tutorial();
  o.zero.stage = 2;
  o.zero.quantized_weights = o.zero.quantized_gradients = false;
  o.zero.hpz_partition_size = 1;
  const gpt::Plan plan = gpt::make_plan(o);
  CHECK(plan.variants.size() == 9);
  CHECK(plan.variants[plan.configured].name == "stage 2");
  // Stage 2 holds full fp16 compute weights: 2P per GPU, more than a 32 GB GPU has for 18B parameters.
  const gpt::PlanMemory& m = plan.variants[plan.configured].memory;
  CHECK(m.of("compute weights") == 2.0 * plan.padded_params);
  CHECK(gpt::plan_report(o).find("DOES NOT FIT") != std::string::npos);
}

// The arena's "activations" category of a layer loop built with this recomputation, in elements (each
// allocation is rounded up to the arena's 64-byte alignment: the sizes here are multiples of it).
int64_t loop_activation_elements(const gpt::GPTConfig& m, int B, const gpt::Recompute& recompute) {
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(m, B, recompute, gpt::cpu_ops(), arena);
  for (const auto& usage : arena.usage_by_category()) {
    if (usage.category == "activations") {
      CHECK(usage.current_bytes == loop.activation_bytes());
      return int64_t(usage.current_bytes) / 4;
    }
  }
  FAIL("no activations category");
  return 0;
}

TEST_CASE("activation counts equal the sizes of the model's own buffers, for every recomputation") {
  gpt::GPTConfig m;
  m.num_layers = 5;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.max_positions = 32;
  m.vocab = 300;
  const int B = 2;
  using gpt::Recompute;
  using gpt::RecomputeMethod;
  for (const Recompute& r :
       {Recompute{}, Recompute::selective(), Recompute::full(), Recompute::full(RecomputeMethod::kUniform, 2),
        Recompute::full(RecomputeMethod::kUniform, 5), Recompute::full(RecomputeMethod::kBlock, 0),
        Recompute::full(RecomputeMethod::kBlock, 3)}) {
    CAPTURE(r.describe());
    CHECK(gpt::activation_elements(m, B, r) == loop_activation_elements(m, B, r));
  }
  // Each granularity saves what it should: selective the probabilities of all blocks but one, full uniform
  // 1 all but one block's saved tensors; uniform 2 keeps the inputs of blocks 0, 2, 4 and the output, with
  // one shared inner input, but two sets of saved tensors.
  const int64_t BTC = int64_t(B) * m.seq_len * m.hidden, probs = int64_t(B) * m.heads * m.seq_len * m.seq_len;
  const int64_t none = gpt::activation_elements(m, B, Recompute{});
  CHECK(none - gpt::activation_elements(m, B, Recompute::selective()) == 4 * probs);
  const int64_t block = 15 * BTC + 4 * B * m.seq_len + probs;
  CHECK(none - gpt::activation_elements(m, B, Recompute::full()) == 4 * block - BTC);
  CHECK(gpt::activation_elements(m, B, Recompute::full(RecomputeMethod::kUniform, 2)) -
            gpt::activation_elements(m, B, Recompute::full()) ==
        block - BTC);
}

TEST_CASE("a cluster that cannot be planned is a usage error") {
  gpt::TrainOptions o = tutorial();
  o.plan.nodes = 0;
  CHECK_THROWS_WITH_AS(
      gpt::make_plan(o),
      "--nodes and --gpus-per-node must be at least 1, for example --nodes 4 --gpus-per-node 16",
      gpt::UsageError);
}

TEST_CASE("offload tiers: memory per tier, NVMe bytes per step and their time, in closed form") {
  gpt::TrainOptions o = tutorial();
  o.zero.quantized_weights = o.zero.quantized_gradients = false;
  o.zero.hpz_partition_size = 1;
  o.accumulation_steps = 2;
  o.global_batch = 128;
  o.zero.offload.optimizer = gpt::OffloadDevice::kNvme;
  o.zero.offload.param = gpt::OffloadDevice::kNvme;
  o.plan.nvme_read_bytes_per_s = 1.3e9;
  o.plan.nvme_write_bytes_per_s = 2.9e9;
  const gpt::Plan plan = gpt::make_plan(o);
  const gpt::PlanVariant& v = plan.variants[plan.configured];
  REQUIRE(v.name == "zero3");
  const gpt::PlanMemory& m = v.memory;
  const double W = 64, P = double(plan.padded_params), k = 2;
  // The optimizer's master, m and v (12P/W) read and written once; the fp16 weight shard (2P/W) read in the
  // forward and the backward of each of the k micro-steps, written once.
  CHECK(m.offload.nvme_read == doctest::Approx(12 * P / W + 2 * k * 2 * P / W).epsilon(1e-12));
  CHECK(m.offload.nvme_written == doctest::Approx(12 * P / W + 2 * P / W).epsilon(1e-12));
  // On disk: the swap files, 14P/W plus 4096-byte alignment of each record and unit.
  CHECK(m.tiers.nvme >= 14 * P / W);
  CHECK(m.tiers.nvme < 14 * P / W + 4096.0 * 200);
  // In memory: no master, moments or compute weights; the swap buffers are host memory beside the GPU.
  double device = 0;
  for (const auto& line : m.states) {
    if (line.state == "master" || line.state == "moments" || line.state == "compute weights") {
      CHECK(line.tier == "nvme");
    } else if (line.tier == "device") {
      device += line.bytes;
    }
  }
  CHECK(m.tiers.device == device);
  CHECK(m.tiers.cpu == m.of("swap buffers"));
  CHECK(m.tiers.cpu > 0);
  CHECK(m.total == m.tiers.device + m.tiers.cpu);
  // A node's 16 GPUs share its disk: each moves its bytes at 1/16 of the stated rates.
  CHECK(v.timing.nvme_read == doctest::Approx(m.offload.nvme_read * 16 / 1.3e9));
  CHECK(v.timing.nvme_write == doctest::Approx(m.offload.nvme_written * 16 / 2.9e9));
  // Only the parameter reads (one pass each way, with overlap_comm) can hide; the rest adds to the step.
  const double read_per_pass = k * 2 * P / W * 16 / 1.3e9;
  CHECK(v.timing.step >= v.timing.nvme_read + v.timing.nvme_write - 2 * read_per_pass);
  const std::string report = gpt::plan_report(o);
  CHECK(report.find("NVMe traffic") != std::string::npos);
  const nlohmann::json j = last_json_line(report).at("plan");
  CHECK(j.at("memory").at("nvme_bytes_per_step").at("read").get<double>() == m.offload.nvme_read);
  CHECK(j.at("memory").at("tiers").at("nvme").get<double>() == m.tiers.nvme);
  CHECK(j.at("cluster").at("nvme_write_bytes_per_s").get<double>() == 2.9e9);

  // Slower disks: the step grows by the bytes over the rate.
  gpt::TrainOptions slow = o;
  slow.plan.nvme_write_bytes_per_s = 1.45e9;
  const gpt::Plan slow_plan = gpt::make_plan(slow);
  const gpt::PlanVariant& s = slow_plan.variants[plan.configured];
  CHECK(s.timing.step - v.timing.step == doctest::Approx(m.offload.nvme_written * 16 / 2.9e9).epsilon(1e-9));
}

TEST_CASE(
    "offload device cpu: the optimizer state is planned in the GPU's host memory, without disk traffic") {
  gpt::TrainOptions o = tutorial();
  o.zero.offload.optimizer = gpt::OffloadDevice::kCpu;
  const gpt::Plan plan = gpt::make_plan(o);
  const gpt::PlanMemory& m = plan.variants[plan.configured].memory;
  const double S = double(plan.padded_params) / 64;
  CHECK(m.tiers.cpu == 12 * S);
  CHECK(m.offload.nvme_read == 0);
  CHECK(m.tiers.nvme == 0);
  CHECK(m.tiers.device == m.total - 12 * S);
}

TEST_CASE("the GPU target counts the fused classifier's chunk of logits, the CPU target the whole logits") {
  gpt::GPTConfig model;  // 2048 rows of logits per micro-batch: twice a chunk
  model.num_layers = 2;
  model.hidden = 64;
  model.heads = 4;
  model.seq_len = 1024;
  model.max_positions = 1024;
  model.vocab = 300;
  gpt::ZeroConfig z;
  z.precision = gpt::DType::kF32;  // 4 bytes per activation on both targets
  const gpt::PlanMemory gpu = gpt::plan_memory(model, z, 1, 1, 2);
  const gpt::PlanMemory cpu = gpt::plan_memory(model, z, 1, 1, 2, 1, gpt::MemoryTarget::kCpu);
  const double Vp = model.padded_vocab();
  // And the attention residual each backend keeps: the CPU the probabilities, the GPU what CudaOps declares
  // (the probabilities until its flash kernel keeps one log-sum-exp per row).
  const double residual = gpt::cuda_attention_residual() == gpt::AttentionResidual::kLogSumExp
                              ? double(model.num_layers) * 2 * model.heads * (1024.0 * 1024 - 1024) * 4
                              : 0;
  CHECK(cpu.of("activations") - gpu.of("activations") ==
        (2048 - gpt::kClassifierChunkRows) * Vp * 4 + residual);
}

TEST_CASE(
    "the CPU backend's count: fp32 activations, widened weights, the ring's staging, the start-up copy") {
  gpt::GPTConfig model;  // GPT-2 124M at sequence 64
  model.num_layers = 12;
  model.hidden = 768;
  model.heads = 12;
  model.seq_len = 64;
  model.max_positions = 1024;
  model.vocab = 50257;
  gpt::ZeroConfig z;
  z.precision = gpt::DType::kF16;
  const gpt::PlanMemory gpu = gpt::plan_memory(model, z, 1, 4, 1);
  const gpt::PlanMemory cpu = gpt::plan_memory(model, z, 1, 4, 1, 1, gpt::MemoryTarget::kCpu);
  const double P = 124475904;  // padded to multiples of 8 x 4 per unit
  // Twice the GPU's fp16 activations, but for the attention residual where CudaOps keeps the log-sum-exp
  // (the CPU keeps the probabilities: 12 layers of 12 heads, 64 x 64 each instead of 64) and the statistics,
  // fp32 on both: LayerNorm's (4 a row in each of the 12 layers, 2 in the head), the losses and their
  // gradients (2 a row), and the log-sum-exp.
  const bool lse = gpt::cuda_attention_residual() == gpt::AttentionResidual::kLogSumExp;
  const double residual = lse ? 12.0 * 12 * (64.0 * 64 - 64) * 4 : 0;
  const double statistics = (12 * 4 + 4) * 64.0 + (lse ? 12.0 * 12 * 64 : 0);
  CHECK(cpu.of("activations") == 2 * gpu.of("activations") + residual - 4 * statistics);
  // Stage 0: the fp32 copy of the fp16 weights (4P), the gradients on the wire (2P), two int32 token rows.
  CHECK(cpu.of("buffers") == 4 * P + 2 * P + 2 * 4 * 64);
  // All-reduce on 4 ranks: 2 receive and 2 send buffers of P/4 fp16 values, and the fp32 sum of one chunk.
  CHECK(cpu.of("communication staging") == 4 * (P / 4) * 2 + 4 * (P / 4));
  CHECK(cpu.of("start-up copy") == 0);  // 4P of initial master is less than the step's 2P + 2P + P
  // Stage 3 with overlap_comm: wte, wpe and two blocks gathered (fp16 wire + fp32 copy), wte's, ln_f's (its
  // buffer stays in the pool from the head on) and one block's fp32 gradient, one bucket of everything
  // (reduce_bucket_size 5e8): send 2P, result 4P/4.
  z.stage = 3;
  z.overlap_comm = true;
  const gpt::PlanMemory s3 = gpt::plan_memory(model, z, 1, 4, 1, 1, gpt::MemoryTarget::kCpu);
  const double wte = 50304.0 * 768, wpe = 1024.0 * 768, block = 12.0 * 768 * 768 + 13 * 768;
  const double gathered = 6 * (wte + wpe + 2 * block), gradients = 4 * (wte + 2 * 768 + block);
  CHECK(s3.of("buffers") == doctest::Approx(gathered + gradients + 2 * P + P + 2 * 4 * 64).epsilon(1e-6));
  CHECK(s3.of("communication staging") == 4 * (P / 4) * 2);
  const double S = P / 4;
  double states = 18 * S;
  CHECK(s3.total == doctest::Approx(states + s3.of("buffers") + s3.of("communication staging") +
                                    s3.of("activations") + s3.of("start-up copy")));
}

// Memory-centric tiling at stage 3 on the CPU backend, GPT-2 124M at sequence 64 on 4 ranks with
// overlap_comm, as the engine's dry run counts them, worked out here by hand from the pools' best fit
// (zero/gather.cc, zero/gradient_sinks.cc): the
// gather pool holds wte, wpe, one buffer of each small unit's size (2C, 3C, 4C, C: the second 3C unit takes
// wpe's buffer, free once the embedding is done) and, for the tiles, two of the qkv tile's size (the
// attention projection's smaller tiles reuse them) and two of the MLP's (4C^2/N, the fc and projection
// tiles), where untiled it holds two whole blocks; the unit-gradient pool wte's, the small units' and one
// tile's. Untiled counts are those of the test above.
TEST_CASE("tiling factors 2 and 4: stage 3's gathered units and unit gradients drop with the tile size") {
  gpt::GPTConfig model;
  model.num_layers = 12;
  model.hidden = 768;
  model.heads = 12;
  model.seq_len = 64;
  model.max_positions = 1024;
  model.vocab = 50257;
  gpt::ZeroConfig z;
  z.precision = gpt::DType::kF16;
  z.stage = 3;
  z.overlap_comm = true;
  auto part = [](const gpt::PlanMemory& m, const std::string& name) {
    for (const gpt::PlanMemoryLine& line : m.buffers) {
      if (line.state == name) return line.bytes;
    }
    return -1.0;
  };
  const double C = 768, wte = 50304.0 * 768, wpe = 1024.0 * 768, block = 12 * C * C + 13 * C;
  // ln_1; the qkv bias; the projection's bias and ln_2; the fc bias; the MLP projection's bias
  const double smalls = 2 * C + 3 * C + 3 * C + 4 * C + C, small_sizes = 2 * C + 3 * C + 4 * C + C;
  const gpt::PlanMemory whole = gpt::plan_memory(model, z, 1, 4, 1, 1, gpt::MemoryTarget::kCpu);
  CHECK(part(whole, "gathered units") == 6 * (wte + wpe + 2 * block));  // fp16 on the wire + fp32
  CHECK(part(whole, "unit gradients") == 4 * (wte + block + 2 * C));    // and ln_f's, pooled from the head on
  double previous = part(whole, "gathered units");
  for (int N : {2, 4}) {
    INFO("tile factor " << N);
    z.tile_factor = N;
    const gpt::PlanMemory tiled = gpt::plan_memory(model, z, 1, 4, 1, 1, gpt::MemoryTarget::kCpu);
    const double qkv_tile = 3 * C * C / N, mlp_tile = 4 * C * C / N;
    const double gathered = part(tiled, "gathered units");
    CHECK(gathered == 6 * (wte + wpe + small_sizes + 2 * qkv_tile + 2 * mlp_tile));
    CHECK(gathered < previous);
    previous = gathered;
    // ln_f's buffer serves ln_1's; the embedding's wpe gradient reuses the tile's buffer where a tile is
    // the larger (N = 2), else it takes a buffer of its own.
    const double wpe_own = wpe > mlp_tile ? wpe : 0;
    CHECK(part(tiled, "unit gradients") == 4 * (wte + smalls + mlp_tile + wpe_own));
    // The other states are those of the untiled model with each unit padded to 8W: the same P here.
    CHECK(tiled.of("master") == whole.of("master"));
  }
}

TEST_CASE("tiling with activation checkpointing: the backward reads the recomputed tiles' shards again") {
  gpt::TrainOptions o = tutorial();
  o.zero.quantized_weights = o.zero.quantized_gradients = false;
  o.zero.hpz_partition_size = 1;
  o.zero.offload.optimizer = gpt::OffloadDevice::kNvme;
  o.zero.offload.param = gpt::OffloadDevice::kNvme;
  const gpt::Plan untiled = gpt::make_plan(o);
  CHECK(gpt::plan_report(o).find("memory-centric tiling off") != std::string::npos);
  o.zero.tile_factor = 4;
  const gpt::Plan plan = gpt::make_plan(o);
  const gpt::PlanVariant& v = plan.variants[plan.configured];
  REQUIRE(v.name == "zero3");
  const double W = 64, C = 6144, S = double(plan.padded_params) / W, L = 40;
  // qkv, attention projection and fc (8 C^2 of each block's 12 C^2) are gathered for the recomputation and
  // again for the backward; the MLP projection once.
  const double regathered = L * 8 * C * C / W;
  CHECK(v.memory.offload.param_read_forward == 2 * S);
  CHECK(v.memory.offload.param_read_backward == doctest::Approx(2 * (S + regathered)).epsilon(1e-12));
  CHECK(v.memory.offload.nvme_read == doctest::Approx(12 * S + 2 * (2 * S + regathered)).epsilon(1e-12));
  // The report shows the factor.
  CHECK(gpt::plan_report(o).find("memory-centric tiling 4 tiles per block matrix") != std::string::npos);
  CHECK(last_json_line(gpt::plan_report(o)).at("plan").at("variants")[0].at("zero").at("tile_factor") == 4);
  CHECK(untiled.padded_params <= plan.padded_params);
}

namespace {

// The tutorial at tensor-parallel size t: d = 64 / t data-parallel ranks, L / t = 16 / t of them per node
// (hpZ's h set to that), the global batch micro x accumulation x d.
gpt::TrainOptions tutorial_at(int t, bool sequence_parallel) {
  gpt::TrainOptions o = tutorial();
  o.tensor_parallel = t;
  o.zero.sequence_parallel = sequence_parallel;
  o.zero.hpz_partition_size = 16 / t;
  o.global_batch = 64 / t;
  return o;
}

// Elements of each unit of one tensor-parallel slice, from Megatron's split: qkv and fc (weights and biases)
// and the projections' weights 1/t, the embedding's rows 1/t; LayerNorms, the projections' biases and the
// position table whole.
Units slice_units_of(const gpt::GPTConfig& m, int t) {
  const Units whole = units_of(m);
  const int64_t C = m.hidden;
  return {whole.wte / t, whole.wpe, 12 * C * C / t + 7 * C / t + 6 * C, whole.ln_f, whole.layers};
}

// The tensor-parallel forward without sequence parallelism, by hand: each micro-step all-reduces [B,T,C]
// after the embedding and after each block's two row-parallel linears (2(t-1) n e bytes per group, e the
// activations' size), and all-gathers the cross-entropy's [B*T, 3] fp32 statistics (t(t-1) n 4 bytes); d
// groups.
double tp_forward_by_hand(const gpt::GPTConfig& m, int B, int t, int d, int activation_bytes) {
  const double n = double(B) * m.seq_len * m.hidden, stats = 3.0 * B * m.seq_len;
  return d * (2.0 * (t - 1) * n * activation_bytes * (1 + 2 * m.num_layers) + t * (t - 1.0) * stats * 4);
}

}  // namespace

TEST_CASE(
    "t = 2, 4: the slice's model states over d, ZeRO's and tensor-parallel bytes, activations per rank") {
  for (int t : {2, 4}) {
    for (bool sp : {false, true}) {
      CAPTURE(t);
      CAPTURE(sp);
      const gpt::TrainOptions o = tutorial_at(t, sp);
      const gpt::Plan plan = gpt::make_plan(o);
      const int d = 64 / t;
      CHECK(plan.tensor_parallel == t);
      CHECK(plan.data_parallel == d);
      CHECK(plan.sequence_parallel == sp);
      CHECK(plan.global_batch == d);
      CHECK(plan.notes.empty());
      const gpt::PlanVariant& v = plan.variants[plan.configured];
      REQUIRE(v.name == "zeropp");
      REQUIRE(v.problem.empty());
      CHECK(v.zero.hpz_partition_size == 16 / t);

      // Model states: the slice's units padded to 8d, sharded over d; the engine's partition says the same.
      const Units u = slice_units_of(o.model, t);
      const int64_t P =
          padded(u.wte, d) + padded(u.wpe, d) + u.layers * padded(u.block, d) + padded(u.ln_f, d);
      const gpt::ParamTable slice = gpt::make_param_table(o.model, 1, gpt::TensorSlice{t, 0});
      const gpt::Partition partition(slice, d, d);
      CHECK(partition.padded_total() == P);
      CHECK(plan.padded_params == P);
      const gpt::PlanMemory& m = v.memory;
      CHECK(m.of("compute weights") == 2.0 * P / d);
      CHECK(m.of("master") == 4.0 * P / d);
      CHECK(m.of("moments") == 8.0 * P / d);
      CHECK(m.of("gradients") == 4.0 * P / d);
      CHECK(m.of("hpZ secondary") == doctest::Approx((1 + 4.0 / 2048) * P / (16 / t)).epsilon(1e-6));
      CHECK(m.model_states == m.of("compute weights") + m.of("master") + m.of("moments") + m.of("gradients") +
                                  m.of("hpZ secondary"));

      // ZeRO's bytes: one data-parallel group of d ranks, 16 / t per node, times the t groups.
      const gpt::comm::TrafficCounts group = gpt::expected_step_traffic(
          gpt::TrafficModelInput{&partition, v.zero, 16 / t, o.accumulation_steps});
      for (int phase = 0; phase < gpt::comm::kNumPhases; ++phase) {
        for (int link = 0; link < 2; ++link)
          CHECK(v.traffic.bytes[phase][link] == t * group.bytes[phase][link]);
      }
      // ZeRO-3's forward gathers by hand: each group's ring of d ranks moves (d - 1) fp16 shards of P / d per
      // rank, crossing the 4 nodes 4 times.
      const gpt::PlanVariant& zero3 = plan.variants[0];
      REQUIRE(zero3.name == "zero3");
      using gpt::comm::Link;
      using gpt::comm::Phase;
      CHECK(zero3.traffic.at(Phase::kParamGatherFwd) == uint64_t(t) * 2 * (d - 1) * uint64_t(P));
      CHECK(zero3.traffic.at(Phase::kParamGatherFwd, Link::kInterNode) ==
            uint64_t(t) * 4 * 2 * (d - 1) * uint64_t(P / d));

      // Tensor-parallel bytes: the closed form, all intra-node, the GPU's half loop moving fp16 activations
      // (fp32 softmax statistics); the forward without SP also by hand.
      const gpt::comm::TrafficCounts tp = gpt::expected_tensor_parallel_traffic(gpt::TensorTrafficInput{
          o.model, o.micro_batch, o.accumulation_steps, t, d, sp, o.zero.recompute, false, gpt::DType::kF16});
      CHECK(plan.tensor_traffic == tp);
      CHECK(tp.total(Link::kInterNode) == 0);
      CHECK(tp.at(Phase::kTpBwd) > 0);
      if (!sp) CHECK(double(tp.at(Phase::kTpFwd)) == tp_forward_by_hand(o.model, 1, t, d, 2));
      CHECK(v.timing.tensor_forward == double(tp.at(Phase::kTpFwd)) / 64 / 150e9);
      CHECK(v.timing.tensor_backward == double(tp.at(Phase::kTpBwd)) / 64 / 150e9);
      // Each rank of a group computes 1/t of the micro-batch's forward FLOPs (a third of 6N + 12LCT).
      CHECK(v.timing.compute_forward ==
            doctest::Approx(o.model.model_flops_per_token() * 512 / 3 / (125e12 * t)).epsilon(1e-12));

      // Activations per rank: the restated count of what the loop allocates (fp16 on the planned GPU) and
      // the paper's formula, for the configured full recomputation and the other two granularities.
      const gpt::ActivationShape shape = gpt::activation_shape(o.model, 1);
      auto ours = [&](const gpt::Recompute& r) {
        gpt::ActivationSetup setup{t, sp, r};
        setup.attention_residual = gpt::cuda_attention_residual();  // what the GPU's CudaOps keeps
        return double(gpt::restated_activations(shape, setup, 2).total_bytes);
      };
      auto paper = [&](const gpt::Recompute& r) {
        return gpt::paper_model_bytes(shape, gpt::ActivationSetup{t, sp, r});
      };
      CHECK(m.of("activations") == ours(gpt::Recompute::full()));
      CHECK(m.activations == ours(gpt::Recompute::full()));
      CHECK(m.activations_checkpointed == ours(gpt::Recompute::full()));
      CHECK(m.activations_selective == ours(gpt::Recompute::selective()));
      CHECK(m.activations_full == ours(gpt::Recompute{}));
      CHECK(m.activations_paper == paper(gpt::Recompute::full()));
      CHECK(m.activations_paper_selective == paper(gpt::Recompute::selective()));
      CHECK(m.activations_paper_full == paper(gpt::Recompute{}));
      // Full recomputation keeps L + 1 residual slots of [b, s, h] (s/t with SP): the bulk of both counts.
      const double slots = 41.0 * 512 * 6144 * 2 / (sp ? t : 1);
      CHECK(m.activations > slots);

      // The report says t, d, SP and the recomputation; the JSON line carries the new numbers.
      const std::string report = gpt::plan_report(o);
      CHECK(report.find("parallelism t = " + std::to_string(t) + " tensor-parallel") != std::string::npos);
      CHECK(report.find("x d = " + std::to_string(d) + " data-parallel; sequence parallelism " +
                        (sp ? "on" : "off") + "; recompute full") != std::string::npos);
      CHECK(report.find("Tensor-parallel bytes per optimizer step") != std::string::npos);
      CHECK(report.find("paper, selective") != std::string::npos);
      const nlohmann::json j = last_json_line(report).at("plan");
      CHECK(j.at("parallelism").at("tensor_parallel") == t);
      CHECK(j.at("parallelism").at("data_parallel") == d);
      CHECK(j.at("parallelism").at("sequence_parallel") == sp);
      CHECK(j.at("tensor_parallel_bytes").at("tp_bwd").at("intra").get<uint64_t>() == tp.at(Phase::kTpBwd));
      CHECK(j.at("memory").at("activations_paper").get<double>() == m.activations_paper);
      CHECK(j.at("memory").at("activations_with_selective_recomputation").get<double>() ==
            m.activations_selective);
      CHECK(j.at("memory").at("master").get<double>() == 4.0 * P / d);
      CHECK(j.at("batch").at("global_batch") == d);
    }
  }
}

TEST_CASE("at t = 1 the restated activation count is the old count, and no tensor-parallel bytes") {
  gpt::GPTConfig m;
  m.num_layers = 5;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.max_positions = 32;
  m.vocab = 300;
  using gpt::Recompute;
  using gpt::RecomputeMethod;
  for (const Recompute& r :
       {Recompute{}, Recompute::selective(), Recompute::full(), Recompute::full(RecomputeMethod::kUniform, 2),
        Recompute::full(RecomputeMethod::kBlock, 3)}) {
    CAPTURE(r.describe());
    const gpt::ActivationSetup setup{1, false, r};
    CHECK(gpt::restated_activations(gpt::activation_shape(m, 2), setup, 4).total_bytes ==
          4 * gpt::activation_elements(m, 2, r));
  }
  const gpt::Plan plan = gpt::make_plan(tutorial());
  CHECK(plan.tensor_parallel == 1);
  CHECK(plan.data_parallel == 64);
  CHECK(plan.tensor_traffic.total() == 0);
  CHECK(plan.variants[plan.configured].timing.tensor_backward == 0);
}

TEST_CASE("the 18B model at t = 1, 2, 4, 8: activations per rank fall with t, tensor-parallel bytes rise") {
  const gpt::TrainOptions o = tutorial();
  const gpt::Plan plan = gpt::make_plan(o);
  REQUIRE(plan.tensor_sweep.size() == 7);  // t = 1; t = 2, 4, 8 without and with SP
  const gpt::PlanTensorRow* previous[2] = {nullptr, nullptr};
  for (const gpt::PlanTensorRow& r : plan.tensor_sweep) {
    CAPTURE(r.t);
    CAPTURE(r.sequence_parallel);
    CHECK(r.problem.empty());
    CHECK(r.d * r.t == 64);
    CHECK(r.hpz == std::min(16, 16 / r.t));
    CHECK(r.global_batch == r.d);
    CHECK(r.fits);
    // ZeRO-3 shards everything: the slice over d is P / W either way, up to each unit's padding.
    CHECK(r.model_states == doctest::Approx(plan.tensor_sweep[0].model_states).epsilon(0.01));
    // The row is the plan of that setup.
    const gpt::Plan at = gpt::make_plan(tutorial_at(r.t, r.sequence_parallel));
    const gpt::PlanVariant& v = at.variants[at.configured];
    CHECK(r.activations == v.memory.activations);
    CHECK(r.activations_paper == v.memory.activations_paper);
    CHECK(r.model_states == v.memory.model_states);
    CHECK(r.tensor_bytes == at.tensor_traffic.total());
    CHECK(r.zero_inter == v.traffic.total(gpt::comm::Link::kInterNode));
    CHECK(r.step == v.timing.step);
    if (r.t == 1) {
      CHECK(r.tensor_bytes == 0);
      previous[0] = previous[1] = &r;
      continue;
    }
    const gpt::PlanTensorRow& before = *previous[r.sequence_parallel];
    CHECK(r.t == 2 * before.t);
    CHECK(r.activations < before.activations);
    CHECK(r.activations_paper < before.activations_paper);
    CHECK(r.tensor_bytes > before.tensor_bytes);
    CHECK(r.memory < before.memory);
    previous[r.sequence_parallel] = &r;
  }
  // Sequence parallelism splits what t alone leaves whole: fewer activations at every t.
  for (size_t i = 1; i + 1 < plan.tensor_sweep.size(); i += 2) {
    CHECK(plan.tensor_sweep[i + 1].sequence_parallel);
    CHECK(plan.tensor_sweep[i + 1].activations < plan.tensor_sweep[i].activations);
  }
  const nlohmann::json rows = last_json_line(gpt::plan_report(o)).at("plan").at("tensor_parallel_sweep");
  REQUIRE(rows.size() == plan.tensor_sweep.size());
  CHECK(rows[5].at("t") == 8);
  CHECK(rows[5].at("activations").get<double>() == plan.tensor_sweep[5].activations);
  CHECK(rows[5].at("tensor_parallel_bytes").get<uint64_t>() == plan.tensor_sweep[5].tensor_bytes);

  // On 4 GPUs per node a group of 8 would leave the node: the sweep stops at 4.
  gpt::TrainOptions small = o;
  small.plan.nodes = 16;
  small.plan.gpus_per_node = 4;
  small.zero.hpz_partition_size = 4;
  CHECK(gpt::make_plan(small).tensor_sweep.size() == 5);
}

TEST_CASE("a tensor-parallel size the cluster or the model cannot take is a usage error") {
  gpt::TrainOptions o = tutorial_at(2, false);
  o.tensor_parallel = 3;
  CHECK_THROWS_WITH_AS(gpt::make_plan(o),
                       "--tensor-model-parallel-size 3 does not divide --gpus-per-node 16; a tensor-parallel "
                       "group must stay inside one node (our rule): choose a divisor of it",
                       gpt::UsageError);
  o.plan.gpus_per_node = 12;
  CHECK_THROWS_AS(gpt::make_plan(o), gpt::UsageError);  // 32 heads are not a multiple of 3
  o = tutorial_at(2, false);
  o.zero.tile_factor = 2;
  CHECK_THROWS_AS(gpt::make_plan(o), gpt::UsageError);
}

// The emulated CPU cluster's shape (bench/cluster.sh): GPT-2 124M, seq 64, 2 nodes x 2 ranks, fp16.
gpt::TrainOptions cpu_cluster() {
  gpt::TrainOptions o = tutorial();
  o.model.num_layers = 12;
  o.model.hidden = 768;
  o.model.heads = 12;
  o.model.seq_len = 64;
  o.global_batch = 4;
  o.zero.recompute = gpt::Recompute{};
  o.zero.hpz_partition_size = 2;
  o.plan.nodes = 2;
  o.plan.gpus_per_node = 2;
  o.plan.gpu_tflops = 0.02;
  o.plan.intra_node_bytes_per_s = 1e9;
  o.plan.inter_node_bytes_per_s = 1e8;
  return o;
}

TEST_CASE("host rates add the stated host work per rank to its pass; without them the step is unchanged") {
  gpt::TrainOptions o = cpu_cluster();
  const gpt::Plan without = gpt::make_plan(o);
  o.plan.host_comm_bytes_per_s = 5e8;
  o.plan.decode_elements_per_s = 4e9;
  o.plan.dequantize_elements_per_s = 2e9;
  o.plan.quantize_elements_per_s = 1e9;
  o.plan.reduce_elements_per_s = 3e9;
  o.plan.optimizer_elements_per_s = 5e8;
  o.plan.link_latency_s = 200e-6;
  o.plan.buffer_bytes_per_s = 2e9;
  const gpt::Plan with = gpt::make_plan(o);
  REQUIRE(with.variants.size() == 8);
  const double P = double(with.padded_params), W = 4, L = 2;
  CHECK(with.gather_units == 15);  // wte, wpe, 12 blocks, ln_f
  // Buckets of 1e7 elements in gradient order: {ln_f, h.11}, h.10 .. h.1 alone, {h.0, wpe}, wte alone; qgZ
  // packs the two of two units and reduces the others in place (wpe: 1024 positions; units padded to 8W:
  // Approx).
  const double C = 768, block = 12 * C * C + 13 * C, packed = (2 * block + 2 * C + 1024 * C) / P;
  CHECK(with.packed_share == doctest::Approx(packed).epsilon(1e-5));
  using gpt::comm::Link;
  using gpt::comm::Phase;
  for (size_t i = 0; i < with.variants.size(); ++i) {
    const gpt::PlanVariant& v = with.variants[i];
    const gpt::PlanTiming& t = v.timing;
    CAPTURE(v.name);
    const auto sent = [&](Phase p) {
      return double(v.traffic.at(p, Link::kIntraNode) + v.traffic.at(p, Link::kInterNode)) / W;
    };
    const double decode = v.zero.quantized_weights ? P / 2e9 : P / 4e9;
    const double own = v.zero.quantized_weights ? P / W / 1e9 : 0;
    CHECK(t.host_forward == doctest::Approx(sent(Phase::kParamGatherFwd) / 5e8 + decode + own));
    // Zero-filled: qgZ's packed buckets and results (its stages are written whole, without a fill), or the
    // fp16 bucket and its fp32 result.
    const double buffers = v.zero.quantized_gradients ? packed * P * 4 + P / W * 4 : P * 2 + P / W * 4;
    const double reduce =
        (v.zero.quantized_gradients ? P * (1 + 1 / L) * (1 / 1e9 + 1 / 2e9) : P * (W - 1) / W / 3e9) +
        buffers / 2e9;
    CHECK(t.host_backward ==
          doctest::Approx((sent(Phase::kParamGatherBwd) + sent(Phase::kGradReduce)) / 5e8 + decode + reduce));
    CHECK(t.optimizer == doctest::Approx(P / W / 5e8));
    CHECK(t.latency == doctest::Approx(200e-6 * (W - 1) * 15 * 3));
    // The same links and compute: the host work only adds (a pass moves by at most its size and one unit's
    // share of it).
    const gpt::PlanTiming& before = without.variants[i].timing;
    CHECK(before.host_forward == 0);
    CHECK(t.step > before.step);
    CHECK(t.step <= before.step + (1 + with.first_unit_share) * (t.host_forward + t.host_backward) +
                        t.optimizer + t.latency + 1e-12);
    // The next step's first gather crosses during the rest of the optimizer (gpt_train's steps follow each
    // other): as much of the forward's exposed part as (1 - the first unit's share) x optimizer.
    const double first_gather =
        with.first_unit_share * std::min(t.compute_forward + t.tensor_forward + t.host_forward, t.comm[0]);
    const double ahead = std::min(first_gather, (1 - with.first_unit_share) * t.optimizer);
    CHECK(t.ahead == doctest::Approx(gpt::ZeroEngine::gathers_ahead(v.zero, 1) ? ahead : 0.0));
    CHECK(t.ahead > 0);
    CHECK(t.exposed + t.ahead >= before.exposed);
  }
  // Without rates: each pass the longer of its compute and its links, plus one unit (the tied embedding's
  // share of P) of the shorter.
  const gpt::PlanTiming& z = without.variants[0].timing;
  const double wte = double(50304 * 768) / double(without.padded_params);
  CHECK(without.first_unit_share == doctest::Approx(wte).epsilon(1e-3));
  CHECK(z.exposed == doctest::Approx(wte * (std::min(z.compute_forward, z.comm[0]) +
                                            std::min(z.compute_backward, z.comm[1] + z.comm[2])))
                         .epsilon(1e-3));
  CHECK(z.step == doctest::Approx(std::max(z.compute_forward, z.comm[0]) +
                                  std::max(z.compute_backward, z.comm[1] + z.comm[2]) + z.exposed));
  // The report names the host column and the JSON carries each part.
  const std::string report = gpt::plan_report(o);
  CHECK(report.find("      host") != std::string::npos);
  const nlohmann::json time = last_json_line(report).at("plan").at("variants")[0].at("time_s");
  CHECK(time.at("optimizer").get<double>() == with.variants[0].timing.optimizer);
  CHECK(time.at("host_forward").get<double>() == with.variants[0].timing.host_forward);
}
