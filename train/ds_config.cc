// Reading the DeepSpeed JSON config; see ds_config.h.
#include "train/ds_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/user_error.h"

namespace gpt {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(DeepSpeedConfig& config, const std::string& path) : config_(config), path_(path) {}

  [[noreturn]] void fail(const std::string& key, const std::string& expected, const json& value) const {
    throw UsageError(path_ + ": " + key + " must be " + expected + ", got " + value.dump());
  }

  std::optional<bool> boolean(const json& object, const std::string& name, const std::string& key) const {
    const json& v = object.at(name);
    if (!v.is_boolean()) fail(key, "true or false", v);
    return v.get<bool>();
  }

  // DeepSpeed accepts integers written as floats (5e8); so do we, when they are whole.
  std::optional<int64_t> integer(const json& object, const std::string& name, const std::string& key,
                                 int64_t min, int64_t max) const {
    const json& v = object.at(name);
    const std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    if (!v.is_number()) fail(key, expected, v);
    const double d = v.get<double>();
    if (std::floor(d) != d || d < double(min) || d > double(max)) fail(key, expected, v);
    return int64_t(d);
  }

  std::optional<double> number(const json& object, const std::string& name, const std::string& key,
                               double min, double max) const {
    const json& v = object.at(name);
    std::ostringstream expected;
    expected << "a number in [" << min << ", " << max << "]";
    if (!v.is_number()) fail(key, expected.str(), v);
    const double d = v.get<double>();
    if (!(d >= min && d <= max)) fail(key, expected.str(), v);
    return d;
  }

  void unknown(const std::string& key) { config_.warnings.push_back("unknown key " + key + " (ignored)"); }

  const json& object(const json& parent, const std::string& name, const std::string& key) const {
    const json& v = parent.at(name);
    if (!v.is_object()) fail(key, "an object", v);
    return v;
  }

  // Readers for the key table: each checks the value's type and range and stores it in `field`.
  using ReadKey = std::function<void(const json& parent, const std::string& name, const std::string& key)>;
  ReadKey integer_into(std::optional<int64_t>& field, int64_t min, int64_t max) const {
    return [this, &field, min, max](const json& o, const std::string& n, const std::string& k) {
      field = integer(o, n, k, min, max);
    };
  }
  ReadKey number_into(std::optional<double>& field, double min, double max) const {
    return [this, &field, min, max](const json& o, const std::string& n, const std::string& k) {
      field = number(o, n, k, min, max);
    };
  }
  // An integer in [min, max], or null (DeepSpeed's "not set"), which leaves `field` unset.
  ReadKey integer_or_null_into(std::optional<int64_t>& field, int64_t min, int64_t max) const {
    return [this, &field, min, max](const json& o, const std::string& n, const std::string& k) {
      const json& v = o.at(n);
      if (v.is_null()) return;
      if (!v.is_number()) {
        fail(k, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "] or null", v);
      }
      field = integer(o, n, k, min, max);
    };
  }
  ReadKey boolean_into(std::optional<bool>& field) const {
    return [this, &field](const json& o, const std::string& n, const std::string& k) {
      field = boolean(o, n, k);
    };
  }
  ReadKey choice_into(std::optional<std::string>& field, std::vector<std::string> allowed) const {
    return [this, &field, allowed](const json& o, const std::string& n, const std::string& k) {
      const json& v = o.at(n);
      std::string choices;
      for (const auto& a : allowed) choices += (choices.empty() ? "" : " | ") + a;
      if (!v.is_string() ||
          std::find(allowed.begin(), allowed.end(), v.get<std::string>()) == allowed.end()) {
        fail(k, "one of \"" + choices + "\"", v);
      }
      field = v.get<std::string>();
    };
  }
  ReadKey string_into(std::optional<std::string>& field) const {
    return [this, &field](const json& o, const std::string& n, const std::string& k) {
      const json& v = o.at(n);
      if (!v.is_string() || v.get<std::string>().empty()) fail(k, "a non-empty string", v);
      field = v.get<std::string>();
    };
  }
  // zeropp_loco_param: an object (LoCo on, its keys read here) or null (DeepSpeed's default: off). The
  // ranges are checked with the rest of ZeRO++'s settings, which name the fix.
  ReadKey loco_into() const {
    return [this](const json& o, const std::string& n, const std::string& k) {
      if (o.at(n).is_null()) return;
      const json& params = object(o, n, k);
      config_.zeropp_loco = true;
      for (const auto& [name, value] : params.items()) {
        const std::string key = k + "." + name;
        if (name == "err_beta") {
          config_.loco_err_beta = number(params, name, key, -1e300, 1e300);
        } else if (name == "reset_T") {
          config_.loco_reset_T = integer(params, name, key, -(int64_t(1) << 50), int64_t(1) << 50);
        } else {
          config_.warnings.push_back("unknown key " + key + " (ignored)");
        }
      }
    };
  }
  ReadKey betas_into() const {
    return [this](const json& o, const std::string& n, const std::string& k) {
      const json& v = o.at(n);
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() || v[0] < 0 || v[0] >= 1 ||
          v[1] < 0 || v[1] >= 1) {
        fail(k, "a pair [beta1, beta2] of numbers in [0, 1)", v);
      }
      config_.optimizer_beta1 = v[0].get<double>();
      config_.optimizer_beta2 = v[1].get<double>();
    };
  }

 private:
  DeepSpeedConfig& config_;
  const std::string& path_;
};

// Every key we read, by its path.
using KeyTable = std::map<std::string, Reader::ReadKey>;
constexpr int64_t kBig = int64_t(1) << 50;

void add_batch_and_precision_keys(const Reader& r, DeepSpeedConfig& c, KeyTable& keys) {
  keys.insert({
      {"train_batch_size", r.integer_into(c.train_batch_size, 1, kBig)},
      {"train_micro_batch_size_per_gpu", r.integer_into(c.train_micro_batch_size_per_gpu, 1, kBig)},
      {"gradient_accumulation_steps", r.integer_into(c.gradient_accumulation_steps, 1, kBig)},
      {"gradient_clipping", r.number_into(c.gradient_clipping, 0, 1e12)},
      {"fp16.enabled", r.boolean_into(c.fp16_enabled)},
      {"fp16.loss_scale", r.number_into(c.loss_scale, 0, 1e30)},
      {"fp16.initial_scale_power", r.integer_into(c.initial_scale_power, 0, 64)},
      {"fp16.loss_scale_window", r.integer_into(c.loss_scale_window, 1, kBig)},
      {"fp16.hysteresis", r.integer_into(c.hysteresis, 1, kBig)},
      {"fp16.min_loss_scale", r.number_into(c.min_loss_scale, 1e-30, 1e30)},
      {"bf16.enabled", r.boolean_into(c.bf16_enabled)},
      {"bfloat16.enabled", r.boolean_into(c.bf16_enabled)},
      {"steps_per_print", r.integer_into(c.steps_per_print, 1, kBig)},
      {"wall_clock_breakdown", r.boolean_into(c.wall_clock_breakdown)},
  });
}

void add_zero_keys(const Reader& r, DeepSpeedConfig& c, KeyTable& keys) {
  const std::string z = "zero_optimization.";
  keys.insert({
      {z + "stage", r.integer_into(c.zero_stage, 0, 3)},
      {z + "reduce_bucket_size", r.integer_into(c.reduce_bucket_size, 1, kBig)},
      {z + "overlap_comm", r.boolean_into(c.overlap_comm)},
      {z + "zero_quantized_weights", r.boolean_into(c.zero_quantized_weights)},
      {z + "zero_quantized_gradients", r.boolean_into(c.zero_quantized_gradients)},
      {z + "zero_hierarchical_allgather", r.boolean_into(c.zero_hierarchical_allgather)},
      {z + "stage3_gather_once_per_step", r.boolean_into(c.stage3_gather_once_per_step)},
      {z + "zero_hpz_partition_size", r.integer_into(c.zero_hpz_partition_size, 1, 1 << 20)},
      // Block sizes are checked ("a positive multiple of 8") with the rest of ZeRO++'s settings.
      {z + "zeropp_weight_block_size", r.integer_into(c.zeropp_weight_block_size, -kBig, kBig)},
      {z + "zeropp_gradient_block_size", r.integer_into(c.zeropp_gradient_block_size, -kBig, kBig)},
      {z + "zeropp_intra_node_gradient_bits", r.integer_into(c.zeropp_intra_node_gradient_bits, -kBig, kBig)},
      {z + "zeropp_loco_param", r.loco_into()},
      {z + "reduce_scatter", r.boolean_into(c.reduce_scatter)},
      {z + "contiguous_gradients", r.boolean_into(c.contiguous_gradients)},
      {z + "stage3_prefetch_bucket_size", r.number_into(c.stage3_prefetch_bucket_size, 0, 1e15)},
      {z + "stage3_param_persistence_threshold",
       r.number_into(c.stage3_param_persistence_threshold, 0, 1e15)},
      {z + "stage3_max_live_parameters", r.number_into(c.stage3_max_live_parameters, 0, 1e15)},
      // Whether the factor can tile the model is checked once the model is known (train/options.cc).
      {z + "memory_centric_tiling_factor", r.integer_into(c.memory_centric_tiling_factor, 1, 1 << 16)},
  });
}

void add_offload_keys(const Reader& r, DeepSpeedConfig& c, KeyTable& keys) {
  const std::string o = "zero_optimization.offload_optimizer.", p = "zero_optimization.offload_param.";
  keys.insert({
      {o + "device", r.choice_into(c.offload_optimizer_device, {"none", "cpu", "nvme"})},
      {o + "nvme_path", r.string_into(c.offload_optimizer_nvme_path)},
      {o + "pin_memory", r.boolean_into(c.offload_optimizer_pin_memory)},
      {o + "buffer_count", r.integer_into(c.offload_optimizer_buffer_count, 1, 1 << 20)},
      {o + "fast_init", r.boolean_into(c.offload_optimizer_fast_init)},
      {o + "pipeline_read", r.boolean_into(c.offload_optimizer_pipeline_read)},
      {o + "pipeline_write", r.boolean_into(c.offload_optimizer_pipeline_write)},
      {o + "ratio", r.number_into(c.offload_optimizer_ratio, 0, 1)},
      {p + "device", r.choice_into(c.offload_param_device, {"none", "cpu", "nvme"})},
      {p + "nvme_path", r.string_into(c.offload_param_nvme_path)},
      {p + "pin_memory", r.boolean_into(c.offload_param_pin_memory)},
      {p + "buffer_count", r.integer_into(c.offload_param_buffer_count, 1, 1 << 20)},
      {p + "buffer_size", r.integer_into(c.offload_param_buffer_size, 1, kBig)},
      {p + "max_in_cpu", r.integer_into(c.offload_param_max_in_cpu, 0, kBig)},
      {"zero_optimization.sub_group_size", r.integer_into(c.sub_group_size, 1, kBig)},
      {"aio.block_size", r.integer_into(c.aio_block_size, 4096, int64_t(1) << 30)},
      {"aio.queue_depth", r.integer_into(c.aio_queue_depth, 1, 4096)},
      {"aio.thread_count", r.integer_into(c.aio_thread_count, 1, 256)},
      {"aio.intra_op_parallelism", r.integer_into(c.aio_thread_count, 1, 256)},
      {"aio.single_submit", r.boolean_into(c.aio_single_submit)},
      {"aio.overlap_events", r.boolean_into(c.aio_overlap_events)},
      {"aio.use_gds", r.boolean_into(c.aio_use_gds)},
  });
}

void add_optimizer_keys(const Reader& r, DeepSpeedConfig& c, KeyTable& keys) {
  keys.insert({
      {"optimizer.type", r.choice_into(c.optimizer_type, {"Adam", "AdamW"})},
      {"optimizer.params.lr", r.number_into(c.optimizer_lr, 0, 10)},
      {"optimizer.params.betas", r.betas_into()},
      {"optimizer.params.eps", r.number_into(c.optimizer_eps, 0, 1)},
      {"optimizer.params.weight_decay", r.number_into(c.optimizer_weight_decay, 0, 10)},
      {"optimizer.params.adam_w_mode", r.boolean_into(c.adam_w_mode)},
      {"scheduler.type", r.choice_into(c.scheduler_type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"})},
      {"scheduler.params.warmup_min_lr", r.number_into(c.warmup_min_lr, 0, 10)},
      {"scheduler.params.warmup_max_lr", r.number_into(c.warmup_max_lr, 0, 10)},
      {"scheduler.params.warmup_num_steps", r.integer_into(c.warmup_num_steps, 0, kBig)},
      {"scheduler.params.total_num_steps", r.integer_into(c.total_num_steps, 1, kBig)},
      {"scheduler.params.warmup_type", r.choice_into(c.warmup_type, {"log", "linear"})},
      {"scheduler.params.warmup_min_ratio", r.number_into(c.warmup_min_ratio, 0, 1)},
      {"scheduler.params.cos_min_ratio", r.number_into(c.cos_min_ratio, 0, 1)},
  });
}

void add_activation_checkpointing_keys(const Reader& r, DeepSpeedConfig& c, KeyTable& keys) {
  const std::string a = "activation_checkpointing.";
  keys.insert({
      {a + "partition_activations", r.boolean_into(c.partition_activations)},
      {a + "contiguous_memory_optimization", r.boolean_into(c.contiguous_memory_optimization)},
      {a + "number_checkpoints", r.integer_or_null_into(c.number_checkpoints, 1, 1 << 20)},
      {a + "cpu_checkpointing", r.boolean_into(c.cpu_checkpointing)},
      {a + "synchronize_checkpoint_boundary", r.boolean_into(c.synchronize_checkpoint_boundary)},
      {a + "profile", r.boolean_into(c.checkpointing_profile)},
  });
}

// Reads every key of `object` (at `prefix`): a known key is checked and stored, a known section is entered,
// anything else is reported as ignored.
void walk(Reader& r, const KeyTable& keys, const json& object, const std::string& prefix) {
  static const std::set<std::string> sections = {"fp16",
                                                 "bf16",
                                                 "bfloat16",
                                                 "zero_optimization",
                                                 "zero_optimization.offload_optimizer",
                                                 "zero_optimization.offload_param",
                                                 "aio",
                                                 "optimizer",
                                                 "scheduler",
                                                 "optimizer.params",
                                                 "scheduler.params",
                                                 "activation_checkpointing"};
  for (const auto& [name, value] : object.items()) {
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (auto it = keys.find(key); it != keys.end()) {
      it->second(object, name, key);
    } else if (sections.count(key)) {
      walk(r, keys, r.object(object, name, key), key);
    } else {
      r.unknown(key);
    }
  }
}

// Line and column of a byte offset, for parse errors.
std::string where(const std::string& text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n')
      ++line, column = 1;
    else
      ++column;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

json parse_object(const std::string& text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UsageError(path + ": malformed JSON at " + where(text, e.byte == 0 ? 0 : e.byte - 1) +
                     "; fix the syntax (DeepSpeed configs are plain JSON, no comments or trailing commas)");
  } catch (const json::out_of_range& e) {  // a number beyond double's range, such as 1e999
    throw UsageError(path + ": " + e.what() + "; write the number within double precision's range");
  }
  if (!root.is_object()) throw UsageError(path + ": the config must be a JSON object { ... }");
  return root;
}

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const std::string& text, const std::string& path) {
  DeepSpeedConfig config;
  config.path = path;
  const json root = parse_object(text, path);
  Reader r(config, path);
  KeyTable keys;
  add_batch_and_precision_keys(r, config, keys);
  add_zero_keys(r, config, keys);
  add_offload_keys(r, config, keys);
  add_optimizer_keys(r, config, keys);
  add_activation_checkpointing_keys(r, config, keys);
  walk(r, keys, root, "");
  return config;
}

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError(path + ": cannot read the DeepSpeed config (" + std::string(std::strerror(errno)) +
                     "); check the --deepspeed_config path");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_deepspeed_config(text.str(), path);
}

}  // namespace gpt
