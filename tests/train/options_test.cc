// gpt_train's activation-recomputation settings (train/options.h): Megatron's --recompute-* flags, the older
// --checkpoint-activations, --sequence-parallel, --distribute-saved-activations and DeepSpeed's
// activation_checkpointing keys resolve into TrainOptions, and every contradiction stops with one line; also
// --peak-tflops (MFU's stated peak, train/peak_flops.h) and zero_hierarchical_allgather.
#include "train/options.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "comm/communicator.h"

namespace {

using gpt::RecomputeGranularity;
using gpt::RecomputeMethod;
using gpt::TrainOptions;

// Parses a small model's command line plus `extra`, for one rank (no data is read: only the path is needed).
TrainOptions parse(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"gpt_train", "--num-layers",          "4",    "--hidden-size",
                                   "32",        "--num-attention-heads", "2",    "--seq-length",
                                   "16",        "--vocab-size",          "1000", "--data-path",
                                   "unused.bin"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  TrainOptions o;
  // Not REQUIRE: error_of() must see the UsageError itself.
  if (!gpt::parse_train_options(int(argv.size()), argv.data(), 1, &o)) throw std::logic_error("--help");
  return o;
}

// The one-line message parse() stops with, or "" when it succeeds.
std::string error_of(const std::vector<std::string>& extra) {
  try {
    parse(extra);
  } catch (const gpt::UsageError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

bool has_note(const TrainOptions& o, const std::string& fragment) {
  for (const std::string& note : o.notes) {
    if (has(note, fragment)) return true;
  }
  return false;
}

// A DeepSpeed config file in the test's temporary folder.
std::string write_config(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path path =
      std::filesystem::path(tmp ? tmp : std::filesystem::temp_directory_path().string()) / name;
  std::ofstream(path) << text;
  return path.string();
}

void check_full(const TrainOptions& o, RecomputeMethod method, int num_layers) {
  CHECK(o.zero.recompute.granularity == RecomputeGranularity::kFull);
  CHECK(o.zero.recompute.method == method);
  CHECK(o.zero.recompute.num_layers == num_layers);
}

}  // namespace

TEST_CASE("recomputation flags resolve to Megatron's meanings") {
  SUBCASE("none by default") {
    const TrainOptions o = parse({});
    CHECK(o.zero.recompute.granularity == RecomputeGranularity::kNone);
    CHECK(o.tensor_parallel == 1);
    CHECK_FALSE(o.zero.sequence_parallel);
    CHECK_FALSE(o.zero.distribute_saved_activations);
  }
  SUBCASE("--checkpoint-activations is full, uniform, 1") {
    check_full(parse({"--checkpoint-activations"}), RecomputeMethod::kUniform, 1);
  }
  SUBCASE("--recompute-granularity full defaults to uniform 1") {
    check_full(parse({"--recompute-granularity", "full"}), RecomputeMethod::kUniform, 1);
  }
  SUBCASE("--checkpoint-activations agrees with --recompute-granularity full") {
    check_full(parse({"--checkpoint-activations", "--recompute-granularity", "full"}),
               RecomputeMethod::kUniform, 1);
  }
  SUBCASE("method and layers") {
    check_full(parse({"--recompute-granularity", "full", "--recompute-method", "block",
                      "--recompute-num-layers", "2"}),
               RecomputeMethod::kBlock, 2);
    check_full(parse({"--recompute-granularity", "full", "--recompute-num-layers", "3"}),
               RecomputeMethod::kUniform, 3);
    // block 0 recomputes nothing but is Megatron's valid setting; uniform up to --num-layers.
    check_full(parse({"--recompute-granularity", "full", "--recompute-method", "block",
                      "--recompute-num-layers", "0"}),
               RecomputeMethod::kBlock, 0);
    check_full(parse({"--checkpoint-activations", "--recompute-num-layers", "4"}), RecomputeMethod::kUniform,
               4);
  }
  SUBCASE("selective, by name or by Megatron's alias") {
    CHECK(parse({"--recompute-activations"}).zero.recompute.is_selective());
    CHECK(parse({"--recompute-granularity", "selective"}).zero.recompute.is_selective());
    CHECK(parse({"--recompute-activations", "--recompute-granularity", "selective"})
              .zero.recompute.is_selective());
  }
  SUBCASE("--sequence-parallel at t = 1 is turned off with a note") {
    const TrainOptions o = parse({"--sequence-parallel"});
    CHECK_FALSE(o.zero.sequence_parallel);
    CHECK(has_note(o, "--sequence-parallel turned off: it needs --tensor-model-parallel-size > 1"));
  }
  SUBCASE("--deepspeed-activation-checkpointing alone says what turns recomputation on") {
    CHECK(has_note(parse({"--deepspeed-activation-checkpointing"}), "--recompute-granularity"));
    CHECK_FALSE(has_note(parse({"--deepspeed-activation-checkpointing", "--checkpoint-activations"}),
                         "--deepspeed-activation-checkpointing"));
  }
}

TEST_CASE("contradicting or misplaced recomputation flags stop with one line") {
  CHECK(has(error_of({"--recompute-granularity", "sometimes"}),
            "--recompute-granularity is 'sometimes'; choose full or selective"));
  CHECK(has(error_of({"--recompute-granularity", "full", "--recompute-method", "random"}),
            "--recompute-method is 'random'; choose uniform or block"));
  CHECK(has(error_of({"--recompute-activations", "--recompute-granularity", "full"}), "contradict"));
  CHECK(has(error_of({"--recompute-activations", "--checkpoint-activations"}),
            "--recompute-activations (selective recomputation) and --checkpoint-activations"));
  CHECK(
      has(error_of({"--checkpoint-activations", "--recompute-granularity", "selective"}),
          "--checkpoint-activations (full recomputation) and --recompute-granularity selective contradict"));
  CHECK(has(error_of({"--recompute-activations", "--recompute-method", "uniform"}),
            "--recompute-method applies to --recompute-granularity full; selective recomputation"));
  CHECK(has(error_of({"--recompute-granularity", "selective", "--recompute-num-layers", "2"}),
            "--recompute-num-layers applies to --recompute-granularity full"));
  CHECK(has(error_of({"--recompute-method", "block"}), "add --recompute-granularity full"));
  CHECK(has(error_of({"--recompute-num-layers", "2"}), "add --recompute-granularity full"));
}

TEST_CASE("--recompute-num-layers is checked against --num-layers") {
  const std::string uniform0 = error_of({"--recompute-granularity", "full", "--recompute-num-layers", "0"});
  CHECK(has(uniform0, "--recompute-num-layers 0 is outside [1, 4] for --recompute-method uniform"));
  CHECK(has(uniform0, "--num-layers 4"));
  CHECK(has(error_of({"--recompute-granularity", "full", "--recompute-num-layers", "5"}),
            "--recompute-num-layers 5 is outside [1, 4]"));
  CHECK(has(error_of({"--recompute-granularity", "full", "--recompute-method", "block",
                      "--recompute-num-layers", "-1"}),
            "--recompute-num-layers -1 is outside [0, 4] for --recompute-method block"));
  CHECK(has(error_of({"--recompute-granularity", "full", "--recompute-method", "block",
                      "--recompute-num-layers", "5"}),
            "is outside [0, 4]"));
}

TEST_CASE("--distribute-saved-activations needs a tensor-parallel group") {
  CHECK(has(
      error_of({"--distribute-saved-activations", "--recompute-granularity", "full"}),
      "--distribute-saved-activations partitions checkpointed activations over the tensor-parallel group: "
      "it needs --tensor-model-parallel-size > 1"));
  CHECK(has(error_of({"--distribute-saved-activations"}), "it needs --tensor-model-parallel-size > 1"));
}

TEST_CASE("DeepSpeed's activation_checkpointing keys") {
  SUBCASE("a wrong type names the key") {
    const std::string path =
        write_config("ac_type.json", R"({"activation_checkpointing": {"partition_activations": "yes"}})");
    CHECK(has(error_of({"--deepspeed_config", path}),
              path + ": activation_checkpointing.partition_activations must be true or false, got \"yes\""));
    const std::string count =
        write_config("ac_count.json", R"({"activation_checkpointing": {"number_checkpoints": 0}})");
    CHECK(
        has(error_of({"--deepspeed_config", count}), "activation_checkpointing.number_checkpoints must be"));
  }
  SUBCASE("partition_activations at t = 1 is accepted without effect") {
    const std::string path =
        write_config("ac_partition.json", R"({"activation_checkpointing": {"partition_activations": true}})");
    const TrainOptions o = parse({"--deepspeed_config", path, "--checkpoint-activations"});
    CHECK_FALSE(o.zero.distribute_saved_activations);
    CHECK(has_note(o,
                   "activation_checkpointing.partition_activations accepted without effect at "
                   "--tensor-model-parallel-size 1"));
    check_full(o, RecomputeMethod::kUniform, 1);  // the JSON configures checkpointing; the flag turns it on
  }
  SUBCASE("the other keys are reported; unknown ones are ignored with a warning") {
    const std::string path = write_config("ac_all.json", R"({"activation_checkpointing": {
        "contiguous_memory_optimization": true, "number_checkpoints": null, "cpu_checkpointing": true,
        "synchronize_checkpoint_boundary": true, "profile": true, "partition_activation": true}})");
    const TrainOptions o = parse({"--deepspeed_config", path});
    CHECK(o.zero.recompute.granularity == RecomputeGranularity::kNone);
    CHECK(has_note(o, "cpu_checkpointing accepted without effect on the CPU backend"));
    CHECK(has_note(o, "contiguous_memory_optimization/number_checkpoints accepted without effect"));
    CHECK(has_note(o, "synchronize_checkpoint_boundary accepted without effect"));
    CHECK(has_note(o, "profile accepted without effect"));
    CHECK(has_note(o, "unknown key activation_checkpointing.partition_activation (ignored)"));
  }
  SUBCASE("false values add no notes") {
    const std::string path = write_config("ac_off.json", R"({"activation_checkpointing": {
        "partition_activations": false, "contiguous_memory_optimization": false, "cpu_checkpointing": false,
        "synchronize_checkpoint_boundary": false, "profile": false}})");
    CHECK_FALSE(has_note(parse({"--deepspeed_config", path}), "activation_checkpointing"));
  }
  SUBCASE("cpu_checkpointing on the CUDA backend keeps full recomputation's checkpoints in host memory") {
    const std::string path =
        write_config("ac_cpu.json", R"({"activation_checkpointing": {"cpu_checkpointing": true}})");
    const TrainOptions full =
        parse({"--deepspeed_config", path, "--device", "cuda", "--checkpoint-activations"});
    CHECK(full.zero.recompute.checkpoints_on_host);
    CHECK(full.zero.recompute.describe() == "full (uniform, 1 layer, checkpoints in host memory)");
    const TrainOptions none = parse({"--deepspeed_config", path, "--device", "cuda"});
    CHECK_FALSE(none.zero.recompute.checkpoints_on_host);
    CHECK(has_note(none, "cpu_checkpointing accepted without effect: it moves full recomputation's"));
    CHECK_FALSE(
        parse({"--deepspeed_config", path, "--checkpoint-activations"}).zero.recompute.checkpoints_on_host);
  }
}

TEST_CASE("tensor parallelism's size against the model and the world; the batch counts data-parallel ranks") {
  // A planned cluster of 1 node x 4 GPUs: the world is 4 ranks.
  const std::vector<std::string> cluster = {"--plan", "--nodes", "1", "--gpus-per-node", "4"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), cluster.begin(), cluster.end());
    return extra;
  };
  const TrainOptions o = parse(with({"--tensor-model-parallel-size", "2", "--global-batch-size", "16"}));
  CHECK(o.tensor_parallel == 2);
  CHECK(o.accumulation_steps == 2);  // 16 = micro 4 x accumulation 2 x 2 data-parallel ranks
  CHECK(has(error_of(with({"--tensor-model-parallel-size", "2", "--global-batch-size", "6"})),
            "global batch 6 is not divisible by micro-batch 4 x data-parallel size 2"));
  CHECK(has(error_of(with({"--tensor-model-parallel-size", "3"})),
            "--tensor-model-parallel-size 3 does not divide the world size 4"));
  // 2 heads: t = 4 splits no whole head.
  CHECK(has(error_of(with({"--tensor-model-parallel-size", "4"})),
            "--tensor-model-parallel-size 4 does not divide --num-attention-heads 2"));
}

TEST_CASE("--peak-tflops on gpt_train's command line") {
  CHECK(parse({}).peak_tflops == 0);  // the device's stated peak
  CHECK(parse({"--peak-tflops", "67"}).peak_tflops == 67);
  CHECK(parse({"--peak-tflops=0.25"}).peak_tflops == 0.25);
  CHECK_THROWS_WITH_AS(parse({"--peak-tflops", "-1"}),
                       doctest::Contains("--peak-tflops '-1' is not a positive number of TFLOP/s"),
                       gpt::UsageError);
}

TEST_CASE("zero_hierarchical_allgather: parsed from the JSON; below stage 3 a problem of the ZeRO config") {
  const std::string path = write_config(
      "hierarchical.json", R"({"zero_optimization": {"stage": 3, "zero_hierarchical_allgather": true}})");
  TrainOptions o = parse({"--deepspeed_config", path});
  CHECK(o.zero.hierarchical_allgather);
  const gpt::comm::Topology topology{4, 0, 2, true};
  CHECK(gpt::first_problem(o.zero.problems(topology)).empty());
  o.zero.stage = 2;
  CHECK(has(gpt::first_problem(o.zero.problems(topology)),
            "zero_hierarchical_allgather routes stage 3's weight gathers, but the stage is 2"));
  CHECK_FALSE(parse({}).zero.hierarchical_allgather);
}
