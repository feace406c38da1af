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

 private:
  DeepSpeedConfig& config_;
  const std::string& path_;
};

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

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const std::string& text, const std::string& path) {
  DeepSpeedConfig config;
  config.path = path;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UsageError(path + ": malformed JSON at " + where(text, e.byte == 0 ? 0 : e.byte - 1) +
                     "; fix the syntax (DeepSpeed configs are plain JSON, no comments or trailing commas)");
  }
  if (!root.is_object()) throw UsageError(path + ": the config must be a JSON object { ... }");
  Reader r(config, path);
  constexpr int64_t kBig = int64_t(1) << 50;

  // Every key we read, by its path: a reader that checks the value's type and range and stores it.
  using ReadKey = std::function<void(const json& parent, const std::string& name, const std::string& key)>;
  auto integer = [&](std::optional<int64_t>& field, int64_t min, int64_t max) -> ReadKey {
    return [&, min, max](const json& o, const std::string& n, const std::string& k) {
      field = r.integer(o, n, k, min, max);
    };
  };
  auto number = [&](std::optional<double>& field, double min, double max) -> ReadKey {
    return [&, min, max](const json& o, const std::string& n, const std::string& k) {
      field = r.number(o, n, k, min, max);
    };
  };
  auto boolean = [&](std::optional<bool>& field) -> ReadKey {
    return [&](const json& o, const std::string& n, const std::string& k) { field = r.boolean(o, n, k); };
  };
  auto choice = [&](std::optional<std::string>& field, std::vector<std::string> allowed) -> ReadKey {
    return [&, allowed](const json& o, const std::string& n, const std::string& k) {
      const json& v = o.at(n);
      std::string choices;
      for (const auto& a : allowed) choices += (choices.empty() ? "" : " | ") + a;
      if (!v.is_string() ||
          std::find(allowed.begin(), allowed.end(), v.get<std::string>()) == allowed.end()) {
        r.fail(k, "one of \"" + choices + "\"", v);
      }
      field = v.get<std::string>();
    };
  };
  auto betas = [&](const json& o, const std::string& n, const std::string& k) {
    const json& v = o.at(n);
    if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() || v[0] < 0 || v[0] >= 1 ||
        v[1] < 0 || v[1] >= 1) {
      r.fail(k, "a pair [beta1, beta2] of numbers in [0, 1)", v);
    }
    config.optimizer_beta1 = v[0].get<double>();
    config.optimizer_beta2 = v[1].get<double>();
  };
  const std::map<std::string, ReadKey> keys = {
      {"train_batch_size", integer(config.train_batch_size, 1, kBig)},
      {"train_micro_batch_size_per_gpu", integer(config.train_micro_batch_size_per_gpu, 1, kBig)},
      {"gradient_accumulation_steps", integer(config.gradient_accumulation_steps, 1, kBig)},
      {"gradient_clipping", number(config.gradient_clipping, 0, 1e12)},
      {"fp16.enabled", boolean(config.fp16_enabled)},
      {"fp16.loss_scale", number(config.loss_scale, 0, 1e30)},
      {"fp16.initial_scale_power", integer(config.initial_scale_power, 0, 64)},
      {"fp16.loss_scale_window", integer(config.loss_scale_window, 1, kBig)},
      {"fp16.hysteresis", integer(config.hysteresis, 1, kBig)},
      {"fp16.min_loss_scale", number(config.min_loss_scale, 1e-30, 1e30)},
      {"bf16.enabled", boolean(config.bf16_enabled)},
      {"bfloat16.enabled", boolean(config.bf16_enabled)},
      {"zero_optimization.stage", integer(config.zero_stage, 0, 3)},
      {"zero_optimization.reduce_bucket_size", integer(config.reduce_bucket_size, 1, kBig)},
      {"zero_optimization.overlap_comm", boolean(config.overlap_comm)},
      {"zero_optimization.zero_quantized_weights", boolean(config.zero_quantized_weights)},
      {"zero_optimization.zero_quantized_gradients", boolean(config.zero_quantized_gradients)},
      {"zero_optimization.zero_hpz_partition_size", integer(config.zero_hpz_partition_size, 1, 1 << 20)},
      // Block sizes are checked ("a positive multiple of 8") with the rest of ZeRO++'s settings.
      {"zero_optimization.zeropp_weight_block_size", integer(config.zeropp_weight_block_size, -kBig, kBig)},
      {"zero_optimization.zeropp_gradient_block_size",
       integer(config.zeropp_gradient_block_size, -kBig, kBig)},
      {"zero_optimization.reduce_scatter", boolean(config.reduce_scatter)},
      {"zero_optimization.contiguous_gradients", boolean(config.contiguous_gradients)},
      {"zero_optimization.stage3_prefetch_bucket_size", number(config.stage3_prefetch_bucket_size, 0, 1e15)},
      {"zero_optimization.stage3_param_persistence_threshold",
       number(config.stage3_param_persistence_threshold, 0, 1e15)},
      {"zero_optimization.stage3_max_live_parameters", number(config.stage3_max_live_parameters, 0, 1e15)},
      {"optimizer.type", choice(config.optimizer_type, {"Adam", "AdamW"})},
      {"optimizer.params.lr", number(config.optimizer_lr, 0, 10)},
      {"optimizer.params.betas", betas},
      {"optimizer.params.eps", number(config.optimizer_eps, 0, 1)},
      {"optimizer.params.weight_decay", number(config.optimizer_weight_decay, 0, 10)},
      {"optimizer.params.adam_w_mode", boolean(config.adam_w_mode)},
      {"scheduler.type", choice(config.scheduler_type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"})},
      {"scheduler.params.warmup_min_lr", number(config.warmup_min_lr, 0, 10)},
      {"scheduler.params.warmup_max_lr", number(config.warmup_max_lr, 0, 10)},
      {"scheduler.params.warmup_num_steps", integer(config.warmup_num_steps, 0, kBig)},
      {"scheduler.params.total_num_steps", integer(config.total_num_steps, 1, kBig)},
      {"scheduler.params.warmup_type", choice(config.warmup_type, {"log", "linear"})},
      {"scheduler.params.warmup_min_ratio", number(config.warmup_min_ratio, 0, 1)},
      {"scheduler.params.cos_min_ratio", number(config.cos_min_ratio, 0, 1)},
      {"steps_per_print", integer(config.steps_per_print, 1, kBig)},
      {"wall_clock_breakdown", boolean(config.wall_clock_breakdown)},
  };
  const std::set<std::string> sections = {"fp16",      "bf16",      "bfloat16",         "zero_optimization",
                                          "optimizer", "scheduler", "optimizer.params", "scheduler.params"};

  std::function<void(const json&, const std::string&)> walk = [&](const json& object,
                                                                  const std::string& prefix) {
    for (const auto& [name, value] : object.items()) {
      const std::string key = prefix.empty() ? name : prefix + "." + name;
      if (auto it = keys.find(key); it != keys.end()) {
        it->second(object, name, key);
      } else if (sections.count(key)) {
        walk(r.object(object, name, key), key);
      } else {
        r.unknown(key);
      }
    }
  };
  walk(root, "");
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
