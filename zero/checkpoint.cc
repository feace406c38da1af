// Saving and loading engine checkpoints; see checkpoint.h.
#include "zero/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "base/fault.h"
#include "zero/sha256.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kFormat = "gpt-zeropp checkpoint";
constexpr int kVersion = 1;

std::string shard_name(int shard, int shards) {
  char name[64];
  std::snprintf(name, sizeof name, "shard_%05d_of_%05d.bin", shard, shards);
  return name;
}

// GPT_FAULT=crash_after:POINT (base/fault.h): rank 0 dies right after that point of a save.
void fault_point(const char* point, const comm::Communicator& world) {
  if (fault_crash_after(point) && world.rank() == 0) {
    std::fprintf(stderr, "GPT_FAULT: exiting after '%s'\n", point);
    std::fflush(stderr);
    _exit(42);
  }
}

// Writes bytes to path whole and flushes them to the disk before returning.
void write_file(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw CheckpointError(path + ": cannot create (" + std::strerror(errno) + ")");
  for (const auto& [data, bytes] : pieces) {
    const char* p = static_cast<const char*>(data);
    for (size_t done = 0; done < bytes;) {
      const ssize_t n = ::write(fd, p + done, bytes - done);
      if (n <= 0) {
        ::close(fd);
        throw CheckpointError(path + ": write failed (" + std::strerror(errno) + "); is the disk full?");
      }
      done += size_t(n);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw CheckpointError(path + ": cannot flush to disk");
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  write_file(tmp, {{text.data(), text.size()}});
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw CheckpointError(path + ": cannot rename into place (" + std::strerror(errno) + ")");
  }
}

json model_json(const GPTConfig& m) {
  return {{"num_layers", m.num_layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"max_positions", m.max_positions},
          {"vocab", m.vocab}};
}

// Gathers a string (at most kSlot bytes) from every rank to every rank.
constexpr size_t kSlot = 1024;
std::vector<std::string> gather_strings(comm::Communicator& world, const std::string& mine) {
  std::string padded = mine;
  padded.resize(kSlot, ' ');
  std::vector<char> all(kSlot * world.size());
  world.all_gather(padded.data(), all.data(), kSlot, comm::Phase::kOther).wait();
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) {
    std::string s(all.data() + r * kSlot, kSlot);
    s.erase(s.find_last_not_of(' ') + 1);
    out.push_back(s);
  }
  return out;
}

// Every rank learns rank 0's problem ("" for none) and throws it, so all ranks stop together.
void agree_on_rank0(comm::Communicator& world, std::string problem) {
  problem.resize(kSlot, '\0');
  world.broadcast(problem.data(), problem.size(), 0, comm::Phase::kOther).wait();
  problem.resize(std::strlen(problem.c_str()));
  if (!problem.empty()) throw CheckpointError(problem);
}

// DIR/latest names the checkpoint; DIR may also be a checkpoint itself. Returns its path and manifest.
std::pair<fs::path, json> read_manifest(const std::string& dir) {
  fs::path path = dir;
  if (!fs::exists(path / "manifest.json")) {
    std::ifstream latest(path / "latest");
    std::string tag;
    if (!(latest >> tag)) {
      throw CheckpointError(dir + ": no checkpoint here (neither " + (path / "latest").string() + " nor " +
                            (path / "manifest.json").string() + "); check --load");
    }
    path = path / tag;
  }
  const std::string manifest_path = (path / "manifest.json").string();
  try {
    std::ifstream in(manifest_path);
    if (!in) throw CheckpointError(manifest_path + ": cannot read (" + std::strerror(errno) + ")");
    json manifest = json::parse(in);
    if (manifest.at("format") != kFormat || manifest.at("version") != kVersion) {
      throw CheckpointError(manifest_path + ": not a gpt-zeropp checkpoint of version " +
                            std::to_string(kVersion));
    }
    return {path, manifest};
  } catch (const json::exception& e) {
    throw CheckpointError(manifest_path + ": not a valid manifest (" + e.what() + ")");
  }
}

// Empty when shard file p matches the manifest's sha256; otherwise the one-line problem.
std::string check_shard(const fs::path& path, const json& files, int p) {
  const std::string file = (path / files.at(p).at("name").get<std::string>()).string();
  const std::string expected = files.at(p).at("sha256");
  try {
    const std::string actual = sha256_file(file);
    if (actual == expected) return "";
    return file + ": checksum mismatch (sha256 " + actual + ", the manifest says " + expected +
           "); the file is truncated or altered: load an earlier checkpoint";
  } catch (const std::runtime_error& e) {
    return std::string(e.what()) + "; the checkpoint is incomplete: load an earlier one";
  }
}

}  // namespace

CheckpointWeights read_checkpoint_weights(const std::string& dir) {
  const auto [path, manifest] = read_manifest(dir);
  CheckpointWeights out;
  try {
    const json& m = manifest.at("model");
    out.model.num_layers = m.at("num_layers");
    out.model.hidden = m.at("hidden");
    out.model.heads = m.at("heads");
    out.model.max_positions = m.at("max_positions");
    out.model.seq_len = out.model.max_positions;
    out.model.vocab = m.at("vocab");
    const json& files = manifest.at("files");
    const json& units = manifest.at("units");
    const int shards = manifest.at("num_shards");
    const int64_t total = manifest.at("shard_total");
    const ParamTable table = make_param_table(out.model);
    if (units.size() != table.units.size()) throw CheckpointError(path.string() + ": unit count differs");
    out.params.assign(table.total, 0.0f);
    std::vector<float> shard(total);
    for (int p = 0; p < shards; ++p) {
      if (std::string problem = check_shard(path, files, p); !problem.empty()) throw CheckpointError(problem);
      const std::string file = (path / files.at(p).at("name").get<std::string>()).string();
      std::ifstream in(file, std::ios::binary);
      in.read(reinterpret_cast<char*>(shard.data()), std::streamsize(total * sizeof(float)));  // the master
      if (!in) throw CheckpointError(file + ": short read");
      for (size_t u = 0; u < units.size(); ++u) {
        const int64_t s = units[u].at("shard"), offset = units[u].at("shard_offset"),
                      numel = units[u].at("numel");
        const int64_t first = std::min(int64_t(p) * s, numel), last = std::min(first + s, numel);
        std::copy(shard.begin() + offset, shard.begin() + offset + (last - first),
                  out.params.begin() + table.units[u].offset + first);
      }
    }
  } catch (const json::exception& e) {
    throw CheckpointError(path.string() + "/manifest.json: missing or malformed field (" + e.what() + ")");
  }
  return out;
}

namespace {

// The manifest of a save: training position, loss scaler, model, partition and each shard file's digest.
json make_manifest(const ZeroEngine& engine, int world_size, const TrainingPosition& position,
                   const std::vector<std::string>& digests) {
  const Partition& partition = engine.partition();
  json manifest;
  manifest["format"] = kFormat;
  manifest["version"] = kVersion;
  manifest["iteration"] = position.iteration;
  manifest["skipped_total"] = position.skipped_total;
  manifest["global_batch"] = position.global_batch;
  manifest["seed"] = position.seed;
  manifest["applied_steps"] = engine.applied_steps();
  const LossScaler::State s = engine.loss_scaler().state();
  manifest["loss_scaler"] = {{"scale", s.scale},
                             {"hysteresis_left", s.hysteresis_left},
                             {"iteration", s.iteration},
                             {"last_overflow_iteration", s.last_overflow_iteration}};
  manifest["model"] = model_json(engine.model());
  manifest["world_size"] = world_size;
  manifest["zero"] = {{"stage", engine.config().stage},
                      {"precision", precision_name(engine.config().precision)}};
  manifest["num_shards"] = partition.num_shards();
  manifest["shard_total"] = partition.shard_total();
  json units = json::array();
  for (size_t u = 0; u < partition.units().size(); ++u) {
    const UnitPartition& p = partition.unit(int(u));
    units.push_back({{"name", engine.table().units[u].name},
                     {"numel", p.numel},
                     {"shard", p.shard},
                     {"shard_offset", p.shard_offset}});
  }
  manifest["units"] = units;
  json files = json::array();
  for (int r = 0; r < partition.num_shards(); ++r) {
    files.push_back({{"name", shard_name(r, partition.num_shards())},
                     {"bytes", 3 * partition.shard_total() * int64_t(sizeof(float))},
                     {"sha256", digests[r]}});
  }
  manifest["files"] = files;
  return manifest;
}

// Keeps the newest `keep` saves in dir (by iteration), removing the older ones.
void prune_checkpoints(const std::string& dir, int keep) {
  std::error_code ec;
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("global_step", 0) == 0 && n.find('.') == std::string::npos) {
      found.emplace_back(std::atoll(n.c_str() + 11), entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  for (size_t i = 0; i + keep < found.size(); ++i) fs::remove_all(found[i].second, ec);
}

}  // namespace

namespace {

// Rank 0 makes DIR and an empty DIR/<name>.tmp; every rank learns whether that worked.
void prepare_directory(comm::Communicator& world, const std::string& dir, const fs::path& tmp_path) {
  std::string problem;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) problem = dir + ": cannot create the checkpoint directory (" + ec.message() + ")";
    fs::remove_all(tmp_path, ec);  // a save that crashed before its rename
    if (problem.empty()) fs::create_directories(tmp_path, ec);
    if (problem.empty() && ec) problem = tmp_path.string() + ": cannot create (" + ec.message() + ")";
  }
  agree_on_rank0(world, problem);
}

// Writes this rank's shard, if it owns one (at stage 0 rank 0 holds the only one). Returns "ok DIGEST", "ok"
// (no shard) or "failed MESSAGE".
std::string write_own_shard(ZeroEngine& engine, comm::Communicator& world, const fs::path& tmp_path) {
  const int shards = engine.partition().num_shards();
  if (world.rank() >= shards) return "ok";
  const ZeroEngine::ShardState state = engine.shard_state();
  const size_t bytes = size_t(state.size) * sizeof(float);
  const std::string file = (tmp_path / shard_name(engine.shard_index(), shards)).string();
  try {
    if (fault_save_fails(world.rank())) throw CheckpointError(file + ": write failed (GPT_FAULT save_fail)");
    write_file(file, {{state.master, bytes}, {state.adam_m, bytes}, {state.adam_v, bytes}});
    return "ok " + sha256_file(file);
  } catch (const CheckpointError& e) {
    return std::string("failed ") + e.what();
  }
}

// Every rank's outcome of write_own_shard; the digests when all succeeded. When any rank failed, rank 0
// removes the partial checkpoint and every rank throws the same message, naming the first rank that failed.
std::vector<std::string> agree_shards_written(comm::Communicator& world, const std::string& mine,
                                              const std::string& name, const std::string& dir,
                                              const fs::path& tmp_path) {
  const std::vector<std::string> outcomes = gather_strings(world, mine.substr(0, kSlot));
  std::vector<std::string> digests;
  for (int r = 0; r < int(outcomes.size()); ++r) {
    if (outcomes[r].rfind("failed ", 0) == 0) {
      if (world.rank() == 0) {
        std::error_code ec;
        fs::remove_all(tmp_path, ec);
      }
      throw CheckpointError(
          "checkpoint " + name + " was not saved: rank " + std::to_string(r) + ": " + outcomes[r].substr(7) +
          "; " + dir + "/latest still names the previous checkpoint (if any); free space and resume from it");
    }
    digests.push_back(outcomes[r].size() > 3 ? outcomes[r].substr(3) : "");
  }
  return digests;
}

// Rank 0: the manifest, the rename into place, then `latest` (each step a crash point for the tests).
void publish(ZeroEngine& engine, comm::Communicator& world, const std::string& dir, const std::string& name,
             const fs::path& tmp_path, const fs::path& final_path, const TrainingPosition& position,
             const std::vector<std::string>& digests, int keep) {
  const json manifest = make_manifest(engine, world.size(), position, digests);
  write_text_atomically((tmp_path / "manifest.json").string(), manifest.dump(1) + "\n");
  fault_point("manifest", world);
  std::error_code ec;
  fs::remove_all(final_path, ec);  // an older save of the same iteration
  fs::rename(tmp_path, final_path, ec);
  if (ec) throw CheckpointError(final_path.string() + ": cannot rename into place (" + ec.message() + ")");
  fault_point("rename", world);
  write_text_atomically((fs::path(dir) / "latest").string(), name + "\n");
  fault_point("latest", world);
  if (keep > 0) prune_checkpoints(dir, keep);
}

}  // namespace

std::string save_checkpoint(ZeroEngine& engine, comm::Communicator& world, const std::string& dir,
                            const TrainingPosition& position, int keep) {
  const std::string name = "global_step" + std::to_string(position.iteration);
  const fs::path final_path = fs::path(dir) / name, tmp_path = fs::path(dir) / (name + ".tmp");
  prepare_directory(world, dir, tmp_path);
  const std::vector<std::string> digests =
      agree_shards_written(world, write_own_shard(engine, world, tmp_path), name, dir, tmp_path);
  fault_point("shards", world);
  std::string problem;
  if (world.rank() == 0) {
    try {
      publish(engine, world, dir, name, tmp_path, final_path, position, digests, keep);
    } catch (const CheckpointError& e) {
      problem = e.what();
    }
  }
  agree_on_rank0(world, problem);  // also the barrier: nobody returns before the checkpoint is in place
  return final_path.string();
}

namespace {

// The training position, loss scaler and world size a manifest records, once its model is checked.
LoadedCheckpoint read_position(const json& manifest, const std::string& manifest_path,
                               const GPTConfig& model) {
  LoadedCheckpoint loaded;
  try {
    if (manifest.at("model") != model_json(model)) {
      throw CheckpointError(manifest_path + ": made for the model " + manifest.at("model").dump() +
                            ", but the flags describe " + model_json(model).dump() +
                            "; pass the model flags the checkpoint was trained with");
    }
    loaded.position.iteration = manifest.at("iteration");
    loaded.position.skipped_total = manifest.at("skipped_total");
    loaded.position.global_batch = manifest.at("global_batch");
    loaded.position.seed = manifest.at("seed");
    loaded.applied_steps = manifest.at("applied_steps");
    const json& s = manifest.at("loss_scaler");
    loaded.scaler = {s.at("scale"), s.at("hysteresis_left"), s.at("iteration"),
                     s.at("last_overflow_iteration")};
    loaded.saved_world_size = manifest.at("world_size");
  } catch (const json::exception& e) {
    throw CheckpointError(manifest_path + ": missing or malformed field (" + e.what() + ")");
  }
  return loaded;
}

// Rank 0 checks every shard file against the manifest and tells everyone, so all ranks stop together.
void agree_shards_intact(comm::Communicator& world, const fs::path& path, const json& files, int old_shards) {
  std::string problem;
  if (world.rank() == 0) {
    for (int p = 0; p < old_shards && problem.empty(); ++p) problem = check_shard(path, files, p);
  }
  agree_on_rank0(world, problem);
}

// Reads this rank's ranges of every unit (master, and Adam's moments unless weights_only) from the old
// shards that hold them: unit u's element x sits in old shard x / old_shard, at its shard_offset +
// x % old_shard.
void read_owned_ranges(const fs::path& path, const json& manifest, const Partition& partition, int me,
                       const ZeroEngine::ShardState& state, bool weights_only) {
  const int old_shards = manifest.at("num_shards");
  const int64_t old_total = manifest.at("shard_total");
  const json& old_units = manifest.at("units");
  const json& files = manifest.at("files");
  std::vector<int> fds(old_shards, -1);
  auto open_shard = [&](int p) {
    if (fds[p] >= 0) return fds[p];
    const std::string file = (path / files.at(p).at("name").get<std::string>()).string();
    fds[p] = ::open(file.c_str(), O_RDONLY);
    if (fds[p] < 0) throw CheckpointError(file + ": cannot open (" + std::strerror(errno) + ")");
    return fds[p];
  };
  for (size_t u = 0; u < partition.units().size(); ++u) {
    const UnitPartition& now = partition.unit(int(u));
    const int64_t old_shard = old_units[u].at("shard"), old_offset = old_units[u].at("shard_offset");
    const int64_t first = std::min(int64_t(me) * now.shard, now.numel);
    const int64_t last = std::min(first + now.shard, now.numel);
    for (int64_t x = first; x < last;) {
      const int p = int(x / old_shard);
      const int64_t run = std::min(last, int64_t(p + 1) * old_shard) - x;
      const int fd = open_shard(p);
      const int64_t at = old_offset + x % old_shard;
      float* targets[3] = {state.master, state.adam_m, state.adam_v};
      for (int array = 0; array < (weights_only ? 1 : 3); ++array) {
        const off_t offset = off_t((array * old_total + at) * int64_t(sizeof(float)));
        const size_t bytes = size_t(run) * sizeof(float);
        char* dst = reinterpret_cast<char*>(targets[array] + now.shard_offset + (x - first));
        if (::pread(fd, dst, bytes, offset) != ssize_t(bytes)) {
          throw CheckpointError(files.at(p).at("name").get<std::string>() + ": short read");
        }
      }
      x += run;
    }
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace

LoadedCheckpoint load_checkpoint(ZeroEngine& engine, comm::Communicator& world, const std::string& dir,
                                 bool weights_only) {
  const auto [path, manifest] = read_manifest(dir);
  const std::string manifest_path = (path / "manifest.json").string();
  LoadedCheckpoint loaded = read_position(manifest, manifest_path, engine.model());
  loaded.path = path.string();

  const Partition& partition = engine.partition();
  if (manifest.at("units").size() != partition.units().size())
    throw CheckpointError(manifest_path + ": unit count differs");
  ZeroEngine::ShardState state = engine.shard_state();
  std::fill(state.master, state.master + state.size, 0.0f);
  if (!weights_only) {
    std::fill(state.adam_m, state.adam_m + state.size, 0.0f);
    std::fill(state.adam_v, state.adam_v + state.size, 0.0f);
  }
  agree_shards_intact(world, path, manifest.at("files"), manifest.at("num_shards"));
  read_owned_ranges(path, manifest, partition, engine.shard_index(), state, weights_only);
  if (!weights_only) engine.set_training_state(loaded.applied_steps, loaded.scaler);
  engine.commit_shard_state();
  world.barrier().wait();
  return loaded;
}

}  // namespace gpt
