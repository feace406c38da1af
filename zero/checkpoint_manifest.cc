// Writing and strictly reading a checkpoint's manifest; see checkpoint_manifest.h.
#include "zero/checkpoint_manifest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/params.h"
#include "zero/partition.h"

namespace gpt {
namespace {

using json = nlohmann::ordered_json;

constexpr const char* kFormat = "gpt-zeropp checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
const char* const kPrecisions[] = {"fp32", "fp16", "bf16", "fp64"};

// Reads fields strictly: a missing field, a wrong type or a value out of range is one CheckpointError naming
// the manifest and the field ("model.hidden", "units[3].shard").
class FieldReader {
 public:
  explicit FieldReader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw CheckpointError(path_ + ": " + problem +
                          "; the manifest is damaged or was edited: load another checkpoint");
  }

  const json& at(const json& object, const std::string& where, const char* key) const {
    const auto it = object.find(key);
    if (it == object.end()) fail("missing field " + where + key);
    return *it;
  }
  const json& object(const json& parent, const std::string& where, const char* key) const {
    const json& value = at(parent, where, key);
    if (!value.is_object()) fail(where + key + " is not an object");
    return value;
  }
  const json& array(const json& parent, const std::string& where, const char* key) const {
    const json& value = at(parent, where, key);
    if (!value.is_array()) fail(where + key + " is not an array");
    return value;
  }
  int64_t integer(const json& parent, const std::string& where, const char* key, int64_t lo,
                  int64_t hi) const {
    const json& value = at(parent, where, key);
    const bool fits = value.is_number_integer() &&
                      !(value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(kInt64Max));
    if (!fits || value.get<int64_t>() < lo || value.get<int64_t>() > hi) {
      fail(where + key + " is " + value.dump() + ", not an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    }
    return value.get<int64_t>();
  }
  uint64_t unsigned_integer(const json& parent, const std::string& where, const char* key) const {
    const json& value = at(parent, where, key);
    if (!value.is_number_unsigned()) fail(where + key + " is " + value.dump() + ", not an unsigned integer");
    return value.get<uint64_t>();
  }
  double positive_number(const json& parent, const std::string& where, const char* key) const {
    const json& value = at(parent, where, key);
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
      fail(where + key + " is " + value.dump() + ", not a positive number");
    }
    return value.get<double>();
  }
  std::string string(const json& parent, const std::string& where, const char* key) const {
    const json& value = at(parent, where, key);
    if (!value.is_string()) fail(where + key + " is " + value.dump() + ", not a string");
    return value.get<std::string>();
  }

 private:
  const std::string& path_;
};

json model_json(const GPTConfig& m) {
  return {{"num_layers", m.num_layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"max_positions", m.max_positions},
          {"vocab", m.vocab}};
}

void read_position(const FieldReader& r, const json& root, CheckpointManifest& m) {
  m.position.iteration = r.integer(root, "", "iteration", 0, kInt64Max);
  m.position.skipped_total = r.integer(root, "", "skipped_total", 0, kInt64Max);
  m.position.global_batch = r.integer(root, "", "global_batch", 1, kInt64Max);
  m.position.seed = r.unsigned_integer(root, "", "seed");
  m.applied_steps = r.integer(root, "", "applied_steps", 0, kInt64Max);
  const json& s = r.object(root, "", "loss_scaler");
  m.scaler.scale = r.positive_number(s, "loss_scaler.", "scale");
  m.scaler.hysteresis_left = int(r.integer(s, "loss_scaler.", "hysteresis_left", 0, 1 << 30));
  m.scaler.iteration = r.integer(s, "loss_scaler.", "iteration", 0, kInt64Max);
  m.scaler.last_overflow_iteration = r.integer(s, "loss_scaler.", "last_overflow_iteration", -1, kInt64Max);
}

// The model's shape, within the limits the llm.c reader also applies (every size then fits int64).
void read_model(const FieldReader& r, const json& root, CheckpointManifest& m) {
  const json& model = r.object(root, "", "model");
  m.model.num_layers = int(r.integer(model, "model.", "num_layers", 1, 1 << 16));
  m.model.hidden = int(r.integer(model, "model.", "hidden", 1, 1 << 20));
  m.model.heads = int(r.integer(model, "model.", "heads", 1, 1 << 16));
  m.model.max_positions = m.model.seq_len = int(r.integer(model, "model.", "max_positions", 1, 1 << 20));
  m.model.vocab = int(r.integer(model, "model.", "vocab", 2, 1 << 16));
  if (std::string problem = m.model.validate(); !problem.empty()) r.fail("model: " + problem);
  const json& zero = r.object(root, "", "zero");
  m.stage = int(r.integer(zero, "zero.", "stage", 0, 3));
  m.precision = r.string(zero, "zero.", "precision");
  if (std::find(std::begin(kPrecisions), std::end(kPrecisions), m.precision) == std::end(kPrecisions)) {
    r.fail("zero.precision \"" + m.precision + "\" is not fp32, fp16, bf16 or fp64");
  }
  if (zero.contains("tile_factor")) {
    m.tile_factor = int(r.integer(zero, "zero.", "tile_factor", 1, 1 << 16));
    if (std::string problem = tile_factor_problem(m.model, m.tile_factor); !problem.empty())
      r.fail("zero.tile_factor: " + problem);
  }
}

// One file entry: its name as expected, its size within [min_bytes, max_bytes], a well-formed digest.
CheckpointManifest::ShardFile read_file_entry(const FieldReader& r, const json& entry,
                                              const std::string& where, const std::string& name,
                                              int64_t min_bytes, int64_t max_bytes) {
  if (!entry.is_object()) r.fail(where + " is not an object");
  CheckpointManifest::ShardFile file;
  file.name = r.string(entry, where, "name");
  if (file.name != name) r.fail(where + "name is not " + name);
  file.bytes = r.integer(entry, where, "bytes", min_bytes, max_bytes);
  file.sha256 = r.string(entry, where, "sha256");
  if (file.sha256.size() != 64 || file.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
    r.fail(where + "sha256 is not 64 lowercase hex digits");
  }
  return file;
}

// LoCo's kept errors, when the manifest lists them: one file per rank, all of the same size.
void read_feedback_files(const FieldReader& r, const json& root, CheckpointManifest& m) {
  if (!root.contains("error_feedback_files")) return;
  m.feedback_layout = r.string(root, "", "error_feedback_layout");
  const json& files = r.array(root, "", "error_feedback_files");
  if (files.size() != size_t(m.world_size)) {
    r.fail("error_feedback_files has " + std::to_string(files.size()) + " entries for " +
           std::to_string(m.world_size) + " ranks");
  }
  for (int rank = 0; rank < m.world_size; ++rank) {
    const int64_t bytes = rank == 0 ? 1 : m.feedback_files[0].bytes;
    m.feedback_files.push_back(
        read_file_entry(r, files[rank], "error_feedback_files[" + std::to_string(rank) + "].",
                        feedback_file_name(rank, m.world_size), bytes, rank == 0 ? int64_t(1) << 50 : bytes));
  }
}

// The pipeline's split, when the run that saved had stages ("pipeline"; absent: one stage).
void read_pipeline(const FieldReader& r, const json& root, CheckpointManifest& m) {
  if (!root.contains("pipeline")) return;
  const json& pipeline = r.object(root, "", "pipeline");
  PipelineLayout& layout = m.pipeline;
  layout.stages = int(r.integer(pipeline, "pipeline.", "stages", 2, m.model.num_layers));
  layout.first_stage_layers = int(r.integer(pipeline, "pipeline.", "first_stage_layers", 0, 1 << 16));
  layout.last_stage_layers = int(r.integer(pipeline, "pipeline.", "last_stage_layers", 0, 1 << 16));
  layout.layers_per_virtual_stage =
      int(r.integer(pipeline, "pipeline.", "layers_per_virtual_stage", 0, 1 << 16));
  if (std::string problem = first_problem(layout.problems(m.model)); !problem.empty())
    r.fail("pipeline: " + problem);
}

// One stage's units, exactly as `partition` of `table` has them.
std::vector<CheckpointManifest::Unit> read_units(const FieldReader& r, const json& parent,
                                                 const std::string& where, const ParamTable& table,
                                                 const Partition& partition) {
  const json& units = r.array(parent, where, "units");
  if (units.size() != table.units.size()) {
    r.fail(where + "units has " + std::to_string(units.size()) + " entries; the model has " +
           std::to_string(table.units.size()) + " gather units");
  }
  std::vector<CheckpointManifest::Unit> out;
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string at = where + "units[" + std::to_string(u) + "].";
    if (!units[u].is_object()) r.fail(at + " is not an object");
    const UnitPartition& expected = partition.unit(int(u));
    CheckpointManifest::Unit unit;
    unit.name = r.string(units[u], at, "name");
    if (unit.name != table.units[u].name) r.fail(at + "name is not " + table.units[u].name);
    unit.numel = r.integer(units[u], at, "numel", expected.numel, expected.numel);
    unit.shard = r.integer(units[u], at, "shard", expected.shard, expected.shard);
    unit.shard_offset = r.integer(units[u], at, "shard_offset", expected.shard_offset, expected.shard_offset);
    out.push_back(unit);
  }
  return out;
}

// Each stage's partition: "units" and "shard_total" at p = 1, each entry of "stages" at p > 1.
void read_stages(const FieldReader& r, const json& root, CheckpointManifest& m, int shards) {
  const int p = m.pipeline.stages;
  const json* stages = p > 1 ? &r.array(root, "", "stages") : nullptr;
  if (stages && stages->size() != size_t(p)) {
    r.fail("stages has " + std::to_string(stages->size()) + " entries for " + std::to_string(p) +
           " pipeline stages");
  }
  for (int s = 0; s < p; ++s) {
    const json& parent = stages ? (*stages)[size_t(s)] : root;
    const std::string where = stages ? "stages[" + std::to_string(s) + "]." : "";
    if (!parent.is_object()) r.fail(where + " is not an object");
    const ParamTable table = m.saved_table(s);
    const Partition partition(table, m.data_parallel(), shards);
    CheckpointManifest::Stage stage;
    stage.shard_total =
        r.integer(parent, where, "shard_total", partition.shard_total(), partition.shard_total());
    stage.units = read_units(r, parent, where, table, partition);
    m.stages.push_back(std::move(stage));
  }
}

// The sizes, each stage's units, then the files: all must be exactly what the saving run's partition made.
void read_partition(const FieldReader& r, const json& root, CheckpointManifest& m) {
  m.world_size = int(r.integer(root, "", "world_size", 1, 1 << 20));
  if (root.contains("tensor_parallel"))  // absent: t = 1 (and in checkpoints from before it existed)
    m.tensor_parallel = int(r.integer(root, "", "tensor_parallel", 2, m.world_size));
  read_pipeline(r, root, m);
  const int t = m.tensor_parallel, p = m.pipeline.stages;
  if (m.world_size % (t * p) != 0) {
    r.fail("tensor_parallel " + std::to_string(t) + " x pipeline stages " + std::to_string(p) +
           " does not divide world_size");
  }
  const ParallelLayout layout{.tensor_parallel = t, .tile_factor = m.tile_factor};
  if (std::string problem = first_problem(layout.problems(m.model)); !problem.empty()) r.fail(problem);
  const int expected_shards = m.stage == 0 ? 1 : m.data_parallel();
  const int shards = int(r.integer(root, "", "num_shards", expected_shards, expected_shards));
  read_stages(r, root, m, shards);
  const json& files = r.array(root, "", "files");
  if (files.size() != size_t(shards) * t * p) {
    r.fail("files has " + std::to_string(files.size()) + " entries for " + std::to_string(shards) +
           " shards of " + std::to_string(t) + " tensor-parallel slice(s) of " + std::to_string(p) +
           " pipeline stage(s)");
  }
  for (int i = 0; i < shards * t * p; ++i) {
    const int stage = i / (shards * t), slice = i / shards % t;
    const int64_t bytes = 3 * m.stages[size_t(stage)].shard_total * int64_t(sizeof(float));
    m.files.push_back(read_file_entry(r, files[i], "files[" + std::to_string(i) + "].",
                                      shard_file_name(i % shards, shards, slice, t, stage, p), bytes, bytes));
  }
}

}  // namespace

std::string shard_file_name(int shard, int shards, int tensor_rank, int tensor_size, int stage, int stages) {
  char part[32];
  std::string name = "shard_";
  std::snprintf(part, sizeof part, "%05d_of_%05d", shard, shards);
  name += part;
  if (tensor_size > 1) {
    std::snprintf(part, sizeof part, "_tp_%02d_of_%02d", tensor_rank, tensor_size);
    name += part;
  }
  if (stages > 1) {
    std::snprintf(part, sizeof part, "_pp_%02d_of_%02d", stage, stages);
    name += part;
  }
  return name + ".bin";
}

std::string feedback_file_name(int rank, int ranks) {
  char name[64];
  std::snprintf(name, sizeof name, "loco_errors_%05d_of_%05d.bin", rank, ranks);
  return name;
}

std::string model_shape_text(const GPTConfig& model) {
  return model_json(model).dump();
}

std::string manifest_text(const CheckpointManifest& m) {
  json root;
  root["format"] = kFormat;
  root["version"] = kVersion;
  root["iteration"] = m.position.iteration;
  root["skipped_total"] = m.position.skipped_total;
  root["global_batch"] = m.position.global_batch;
  root["seed"] = m.position.seed;
  root["applied_steps"] = m.applied_steps;
  root["loss_scaler"] = {{"scale", m.scaler.scale},
                         {"hysteresis_left", m.scaler.hysteresis_left},
                         {"iteration", m.scaler.iteration},
                         {"last_overflow_iteration", m.scaler.last_overflow_iteration}};
  root["model"] = model_json(m.model);
  root["world_size"] = m.world_size;
  if (m.tensor_parallel > 1) root["tensor_parallel"] = m.tensor_parallel;
  if (m.pipeline.stages > 1) {
    root["pipeline"] = {{"stages", m.pipeline.stages},
                        {"first_stage_layers", m.pipeline.first_stage_layers},
                        {"last_stage_layers", m.pipeline.last_stage_layers},
                        {"layers_per_virtual_stage", m.pipeline.layers_per_virtual_stage}};
  }
  root["zero"] = {{"stage", m.stage}, {"precision", m.precision}};
  if (m.tile_factor > 1) root["zero"]["tile_factor"] = m.tile_factor;
  root["num_shards"] = m.num_shards();
  const auto stage_json = [](const CheckpointManifest::Stage& stage) {
    json units = json::array();
    for (const CheckpointManifest::Unit& u : stage.units) {
      units.push_back(
          {{"name", u.name}, {"numel", u.numel}, {"shard", u.shard}, {"shard_offset", u.shard_offset}});
    }
    return json{{"shard_total", stage.shard_total}, {"units", units}};
  };
  if (m.pipeline.stages == 1) {
    root.update(stage_json(m.stages.at(0)));
  } else {
    json stages = json::array();
    for (const CheckpointManifest::Stage& stage : m.stages) stages.push_back(stage_json(stage));
    root["stages"] = stages;
  }
  auto file_list = [](const std::vector<CheckpointManifest::ShardFile>& list) {
    json files = json::array();
    for (const CheckpointManifest::ShardFile& f : list)
      files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
    return files;
  };
  root["files"] = file_list(m.files);
  if (!m.feedback_files.empty()) {
    root["error_feedback_layout"] = m.feedback_layout;
    root["error_feedback_files"] = file_list(m.feedback_files);
  }
  return root.dump(1) + "\n";
}

CheckpointManifest parse_manifest(std::string_view text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw CheckpointError(path + ": not a valid manifest (" + e.what() + ")");
  }
  const FieldReader r(path);
  if (!root.is_object()) r.fail("not a JSON object");
  const auto format = root.find("format"), version = root.find("version");
  if (format == root.end() || *format != kFormat || version == root.end() || *version != kVersion) {
    throw CheckpointError(path + ": not a gpt-zeropp checkpoint of version " + std::to_string(kVersion));
  }
  CheckpointManifest m;
  read_position(r, root, m);
  read_model(r, root, m);
  read_partition(r, root, m);
  read_feedback_files(r, root, m);
  return m;
}

}  // namespace gpt
