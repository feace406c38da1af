// Reading the DeepSpeed JSON config; see ds_config.h.
#include "train/ds_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "train/flags.h"

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
  for (const auto& [name, value] : root.items()) {
    if (name == "train_batch_size") {
      config.train_batch_size = r.integer(root, name, name, 1, kBig);
    } else if (name == "train_micro_batch_size_per_gpu") {
      config.train_micro_batch_size_per_gpu = r.integer(root, name, name, 1, kBig);
    } else if (name == "gradient_accumulation_steps") {
      config.gradient_accumulation_steps = r.integer(root, name, name, 1, kBig);
    } else if (name == "gradient_clipping") {
      config.gradient_clipping = r.number(root, name, name, 0, 1e12);
    } else if (name == "fp16") {
      const json& fp16 = r.object(root, name, name);
      for (const auto& [key, v] : fp16.items()) {
        const std::string path_key = "fp16." + key;
        if (key == "enabled")
          config.fp16_enabled = r.boolean(fp16, key, path_key);
        else if (key == "loss_scale")
          config.loss_scale = r.number(fp16, key, path_key, 0, 1e30);
        else if (key == "initial_scale_power")
          config.initial_scale_power = r.integer(fp16, key, path_key, 0, 64);
        else if (key == "loss_scale_window")
          config.loss_scale_window = r.integer(fp16, key, path_key, 1, kBig);
        else if (key == "hysteresis")
          config.hysteresis = r.integer(fp16, key, path_key, 1, kBig);
        else if (key == "min_loss_scale")
          config.min_loss_scale = r.number(fp16, key, path_key, 1e-30, 1e30);
        else
          r.unknown(path_key);
      }
    } else if (name == "bf16" || name == "bfloat16") {
      const json& bf16 = r.object(root, name, name);
      for (const auto& [key, v] : bf16.items()) {
        if (key == "enabled")
          config.bf16_enabled = r.boolean(bf16, key, name + "." + key);
        else
          r.unknown(name + "." + key);
      }
    } else if (name == "zero_optimization") {
      const json& zero = r.object(root, name, name);
      for (const auto& [key, v] : zero.items()) {
        const std::string path_key = "zero_optimization." + key;
        if (key == "stage")
          config.zero_stage = r.integer(zero, key, path_key, 0, 3);
        else if (key == "reduce_bucket_size")
          config.reduce_bucket_size = r.integer(zero, key, path_key, 1, kBig);
        else if (key == "overlap_comm")
          config.overlap_comm = r.boolean(zero, key, path_key);
        else
          r.unknown(path_key);
      }
    } else {
      r.unknown(name);
    }
  }
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
