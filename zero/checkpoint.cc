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
#include <functional>
#include <iterator>
#include <sstream>
#include <vector>

#include "base/fault.h"
#include "zero/checkpoint_manifest.h"
#include "zero/partition.h"
#include "zero/sha256.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

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
std::pair<fs::path, CheckpointManifest> read_manifest(const std::string& dir) {
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
  std::ifstream in(manifest_path, std::ios::binary);
  if (!in) throw CheckpointError(manifest_path + ": cannot read (" + std::strerror(errno) + ")");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return {path, parse_manifest(text, manifest_path)};
}

// Empty when the shard file matches the manifest's sha256; otherwise the one-line problem.
std::string check_shard(const fs::path& path, const CheckpointManifest::ShardFile& shard) {
  const std::string file = (path / shard.name).string();
  const std::string& expected = shard.sha256;
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

namespace {

// The master weights of pipeline stage `stage`'s tensor-parallel slice `tensor_rank` in its saved_table's
// layout, from its shard files.
std::vector<float> read_part_weights(const fs::path& path, const CheckpointManifest& manifest, int stage,
                                     int tensor_rank) {
  const ParamTable table = manifest.saved_table(stage, tensor_rank);
  const Partition saved(table, manifest.data_parallel(), manifest.num_shards());  // as the manifest checked
  std::vector<float> params(table.total, 0.0f), shard(manifest.stages[size_t(stage)].shard_total);
  for (int p = 0; p < manifest.num_shards(); ++p) {
    const CheckpointManifest::ShardFile& file = manifest.file(stage, tensor_rank, p);
    if (std::string problem = check_shard(path, file); !problem.empty()) throw CheckpointError(problem);
    std::ifstream in(path / file.name, std::ios::binary);
    // The file's first third is the fp32 master shard: the weights.
    in.read(reinterpret_cast<char*>(shard.data()), std::streamsize(shard.size() * sizeof(float)));
    if (!in) throw CheckpointError((path / file.name).string() + ": short read");
    for (int u = 0; u < int(saved.units().size()); ++u) {
      const Partition::Range range = saved.owned_model_range(u, p);
      const auto piece = shard.begin() + saved.unit(u).shard_offset;
      std::copy(piece, piece + (range.end - range.begin), params.begin() + range.begin);
    }
  }
  return params;
}

}  // namespace

CheckpointWeights read_checkpoint_weights(const std::string& dir) {
  const auto [path, manifest] = read_manifest(dir);
  CheckpointWeights out;
  out.model = manifest.model;
  // Each stage's slices go back to their places in the whole model (the tied wte, held by the first and the
  // last stage, is the same in both).
  const ParamTable whole = make_param_table(out.model);
  out.params.assign(whole.total, 0.0f);
  for (int s = 0; s < manifest.pipeline.stages; ++s) {
    for (int r = 0; r < manifest.tensor_parallel; ++r) {
      const std::vector<float> part = read_part_weights(path, manifest, s, r);
      place_in_whole_model(manifest.saved_table(s, r), part.data(), whole, out.params.data());
    }
  }
  return out;
}

namespace {

// The manifest of a save: training position, loss scaler, model, partition and each shard file's digest.
CheckpointManifest make_manifest(const ZeroEngine& engine, int world_size, const TrainingPosition& position,
                                 const std::vector<std::string>& digests,
                                 const std::vector<std::string>& feedback_digests) {
  CheckpointManifest manifest;
  manifest.position = position;
  manifest.applied_steps = engine.applied_steps();
  manifest.scaler = engine.loss_scaler().state();
  manifest.model = engine.model();
  manifest.world_size = world_size;
  manifest.tensor_parallel = engine.tensor_parallel_size();
  manifest.pipeline = engine.pipeline_layout();
  manifest.stage = engine.config().stage;
  manifest.precision = precision_name(engine.config().precision);
  manifest.tile_factor = engine.config().tile_factor;
  // Every stage's partition, as each stage's engine made its own (this one's is engine.partition()).
  const int t = manifest.tensor_parallel, p = manifest.pipeline.stages,
            shards = engine.partition().num_shards();
  const int d = world_size / (t * p);
  for (int s = 0; s < p; ++s) {
    const ParamTable table = manifest.saved_table(s);
    const Partition partition(table, d, shards);
    CheckpointManifest::Stage stage{{}, partition.shard_total()};
    for (size_t u = 0; u < partition.units().size(); ++u) {
      const UnitPartition& unit = partition.unit(int(u));
      stage.units.push_back({table.units[u].name, unit.numel, unit.shard, unit.shard_offset});
    }
    // Stage-major, then slice-major; shard q of slice r of stage s was written by world rank (s d + q) t + r
    // (Megatron's order: tensor, data, pipeline).
    for (int r = 0; r < t; ++r) {
      for (int q = 0; q < shards; ++q) {
        manifest.files.push_back({shard_file_name(q, shards, r, t, s, p),
                                  3 * stage.shard_total * int64_t(sizeof(float)),
                                  digests[(s * d + q) * t + r]});
      }
    }
    manifest.stages.push_back(std::move(stage));
  }
  for (int r = 0; r < int(feedback_digests.size()); ++r) {
    manifest.feedback_files.push_back(
        {feedback_file_name(r, world_size), int64_t(engine.feedback_bytes()), feedback_digests[r]});
  }
  manifest.feedback_layout = engine.feedback_layout();
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

// Writes a file of this rank's with write(file); returns "ok DIGEST" or "failed MESSAGE".
std::string write_outcome(const std::string& file, const std::function<void(const std::string&)>& write,
                          const comm::Communicator& world) {
  try {
    if (fault_save_fails(world.rank())) throw CheckpointError(file + ": write failed (GPT_FAULT save_fail)");
    write(file);
    return "ok " + sha256_file(file);
  } catch (const CheckpointError& e) {
    return std::string("failed ") + e.what();
  }
}

// Writes this rank's optimizer state as one shard file [master | m | v], chunk by chunk as the engine hands
// it over (it may stream from NVMe), so the whole state is never in host memory at once.
void write_state_file(ZeroEngine& engine, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw CheckpointError(path + ": cannot create (" + std::strerror(errno) + ")");
  const int64_t S = engine.partition().shard_total();
  std::string problem;
  engine.read_state([&](int64_t begin, int64_t n, float* master, float* m, float* v) {
    const float* arrays[3] = {master, m, v};
    for (int a = 0; a < 3 && problem.empty(); ++a) {
      const char* p = reinterpret_cast<const char*>(arrays[a]);
      const size_t bytes = size_t(n) * sizeof(float);
      const off_t at = off_t((a * S + begin) * int64_t(sizeof(float)));
      for (size_t done = 0; done < bytes && problem.empty();) {
        const ssize_t w = ::pwrite(fd, p + done, bytes - done, at + off_t(done));
        if (w <= 0) problem = path + ": write failed (" + std::strerror(errno) + "); is the disk full?";
        done += w > 0 ? size_t(w) : 0;
      }
    }
  });
  if (problem.empty() && ::fsync(fd) != 0) problem = path + ": cannot flush to disk";
  if (::close(fd) != 0 && problem.empty()) problem = path + ": cannot close";
  if (!problem.empty()) throw CheckpointError(problem);
}

// Writes this rank's shard, if it owns one (at stage 0 rank 0 holds the only one). Returns "ok DIGEST", "ok"
// (no shard) or "failed MESSAGE".
std::string write_own_shard(ZeroEngine& engine, comm::Communicator& world, const fs::path& tmp_path) {
  const int shards = engine.partition().num_shards();
  if (engine.data_parallel_rank() >= shards) return "ok";
  const std::string file =
      (tmp_path / shard_file_name(engine.shard_index(), shards, engine.tensor_parallel_rank(),
                                  engine.tensor_parallel_size(), engine.pipeline_stage(),
                                  engine.pipeline_layout().stages))
          .string();
  return write_outcome(
      file, [&](const std::string& path) { write_state_file(engine, path); }, world);
}

// Writes this rank's LoCo kept errors (every rank has them, of the same size). Returns as write_own_shard.
std::string write_own_feedback(ZeroEngine& engine, comm::Communicator& world, const fs::path& tmp_path) {
  const std::vector<uint8_t> kept = engine.feedback_state();
  const std::string file = (tmp_path / feedback_file_name(world.rank(), world.size())).string();
  return write_outcome(
      file,
      [&](const std::string& path) {
        write_file(path, {{kept.data(), kept.size()}});
      },
      world);
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
             const std::vector<std::string>& digests, const std::vector<std::string>& feedback_digests,
             int keep) {
  const CheckpointManifest manifest =
      make_manifest(engine, world.size(), position, digests, feedback_digests);
  write_text_atomically((tmp_path / "manifest.json").string(), manifest_text(manifest));
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
  std::vector<std::string> feedback_digests;
  if (engine.feedback_bytes() > 0) {
    feedback_digests =
        agree_shards_written(world, write_own_feedback(engine, world, tmp_path), name, dir, tmp_path);
  }
  fault_point("shards", world);
  std::string problem;
  if (world.rank() == 0) {
    try {
      publish(engine, world, dir, name, tmp_path, final_path, position, digests, feedback_digests, keep);
    } catch (const CheckpointError& e) {
      problem = e.what();
    }
  }
  agree_on_rank0(world, problem);  // also the barrier: nobody returns before the checkpoint is in place
  return final_path.string();
}

namespace {

// The training position, loss scaler and world size a manifest records, once its model is checked.
LoadedCheckpoint read_position(const CheckpointManifest& manifest, const std::string& manifest_path,
                               const GPTConfig& model) {
  if (model_shape_text(manifest.model) != model_shape_text(model)) {
    throw CheckpointError(manifest_path + ": made for the model " + model_shape_text(manifest.model) +
                          ", but the flags describe " + model_shape_text(model) +
                          "; pass the model flags the checkpoint was trained with");
  }
  LoadedCheckpoint loaded;
  loaded.position = manifest.position;
  loaded.applied_steps = manifest.applied_steps;
  loaded.scaler = manifest.scaler;
  loaded.saved_world_size = manifest.world_size;
  return loaded;
}

// Rank 0 checks every shard file against the manifest and tells everyone, so all ranks stop together.
void agree_shards_intact(comm::Communicator& world, const fs::path& path,
                         const CheckpointManifest& manifest) {
  std::string problem;
  if (world.rank() == 0) {
    for (const auto& file : manifest.files) {
      problem = check_shard(path, file);
      if (!problem.empty()) break;
    }
  }
  agree_on_rank0(world, problem);
}

// Reads this rank's ranges of every unit (master, and Adam's moments unless weights_only) that fall in flat
// shard elements [begin, begin + n) from the old shards that hold them, into the chunk's arrays. Elements
// are matched through the model layout, which no partition changes: when the run that saved had the same
// tensor-parallel size and gave this rank's pipeline stage the same chunks, model element y sits in the saved
// unit u that covers it, at x = y - (u's model offset), in old shard x / old_shard at its shard_offset +
// x % old_shard. So the world size and the tile factor may differ from the run that saved. So may the
// tensor-parallel size and the pipeline's split: then each parameter's runs in this rank's part are found,
// through their indices in the whole model (params.h, for_each_run), in the saved stage and slices that hold
// them.
class OwnedRangeReader {
 public:
  OwnedRangeReader(const fs::path& path, const CheckpointManifest& manifest, const ZeroEngine& engine,
                   bool weights_only)
      : path_(path),
        manifest_(manifest),
        table_(engine.table()),
        partition_(engine.partition()),
        me_(engine.shard_index()),
        weights_only_(weights_only),
        fds_(manifest.files.size(), -1) {
    for (const CheckpointManifest::Stage& stage : manifest.stages) {
      std::vector<int64_t>& offsets = saved_offsets_.emplace_back();
      int64_t offset = 0;
      for (const CheckpointManifest::Unit& u : stage.units) {
        offsets.push_back(offset);
        offset += u.numel;
      }
    }
    const int stage = engine.pipeline_stage();
    if (manifest.tensor_parallel == table_.slice.size &&
        stage_chunks(manifest.model, manifest.pipeline, std::min(stage, manifest.pipeline.stages - 1)) ==
            stage_chunks(engine.model(), engine.pipeline_layout(), stage)) {
      same_layout_stage_ = stage;
    } else {
      for (int s = 0; s < manifest.pipeline.stages; ++s) saved_tables_.push_back(manifest.saved_table(s));
    }
  }
  ~OwnedRangeReader() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }

  void read(int64_t begin, int64_t n, float* master, float* m, float* v) {
    for (size_t u = 0; u < partition_.units().size(); ++u) {
      const UnitPartition& now = partition_.unit(int(u));
      const int64_t first = std::min(int64_t(me_) * now.shard, now.numel);
      const int64_t last = std::min(first + now.shard, now.numel);
      // Element x of the unit sits at flat shard element now.shard_offset + (x - first).
      const int64_t lo = std::max(first, first + begin - now.shard_offset);
      const int64_t hi = std::min(last, first + begin + n - now.shard_offset);
      if (lo >= hi) continue;
      float* targets[3] = {master, m, v};
      read_model_range(now.model_offset + lo, now.model_offset + hi, targets,
                       now.shard_offset + (lo - first) - begin);
    }
  }

 private:
  // This rank's model elements [y, end) into targets at `at`.
  void read_model_range(int64_t y, int64_t end, float* targets[3], int64_t at) {
    if (same_layout_stage_ >= 0) {  // the same part was saved: the same layout
      for (int64_t x = y; x < end;)
        x += read_run(same_layout_stage_, table_.slice.rank, x, end, targets, at + (x - y));
      return;
    }
    for (size_t k = 0; k < table_.params.size(); ++k) {
      const ParamInfo& p = table_.params[k];
      if (p.numel == 0 || p.offset >= end || p.offset + p.numel <= y) continue;  // 0: another stage's
      for_each_run(p, table_.slice, [&](int64_t local, int64_t whole, int64_t length) {
        const int64_t a = std::max(y, p.offset + local), b = std::min(end, p.offset + local + length);
        if (a < b) read_whole(k, whole + (a - p.offset - local), b - a, targets, at + (a - y));
      });
    }
  }
  // Elements [w, w + n) of parameter k in the whole parameter, from the saved slices of the first saved
  // stage that holds it (the tied wte's two copies are the same).
  void read_whole(size_t k, int64_t w, int64_t n, float* targets[3], int64_t at) {
    int s = 0;
    while (saved_tables_[size_t(s)].params[k].numel == 0) ++s;    // some stage holds every parameter
    const ParamInfo& saved = saved_tables_[size_t(s)].params[k];  // every saved slice has the same offsets
    for (int r = 0; r < manifest_.tensor_parallel; ++r) {
      for_each_run(saved, TensorSlice{manifest_.tensor_parallel, r},
                   [&](int64_t local, int64_t whole, int64_t length) {
                     const int64_t a = std::max(w, whole), b = std::min(w + n, whole + length);
                     const int64_t y = saved.offset + local + (a - whole), end = y + (b - a);
                     for (int64_t x = y; x < end;)
                       x += read_run(s, r, x, end, targets, at + (a - w) + (x - y));
                   });
    }
  }
  // Reads model elements [y, end) of saved stage s's slice r as far as one old shard of one saved unit holds
  // them; returns how many.
  int64_t read_run(int s, int r, int64_t y, int64_t end, float* targets[3], int64_t at) {
    const std::vector<int64_t>& offsets = saved_offsets_[size_t(s)];
    // The last unit starting at or before y: a stage's emptied units start where the next held one does.
    const size_t u = size_t(std::upper_bound(offsets.begin(), offsets.end(), y) - offsets.begin()) - 1;
    const CheckpointManifest::Stage& stage = manifest_.stages[size_t(s)];
    const CheckpointManifest::Unit& saved = stage.units[u];
    const int64_t x = y - offsets[u];
    const int p = int(x / saved.shard);
    const int64_t run = std::min({end - y, int64_t(p + 1) * saved.shard - x, saved.numel - x});
    const int file = manifest_.file_index(s, r, p);
    const int fd = open_shard(file);
    for (int array = 0; array < (weights_only_ ? 1 : 3); ++array) {
      const off_t offset =
          off_t((array * stage.shard_total + saved.shard_offset + x % saved.shard) * int64_t(sizeof(float)));
      const size_t bytes = size_t(run) * sizeof(float);
      if (::pread(fd, targets[array] + at, bytes, offset) != ssize_t(bytes)) {
        throw CheckpointError(manifest_.files[size_t(file)].name + ": short read");
      }
    }
    return run;
  }
  int open_shard(int i) {
    if (fds_[i] >= 0) return fds_[i];
    const std::string file = (path_ / manifest_.files[i].name).string();
    fds_[i] = ::open(file.c_str(), O_RDONLY);
    if (fds_[i] < 0) throw CheckpointError(file + ": cannot open (" + std::strerror(errno) + ")");
    return fds_[i];
  }

  const fs::path& path_;
  const CheckpointManifest& manifest_;
  const ParamTable& table_;
  const Partition& partition_;
  int me_;
  bool weights_only_;
  std::vector<int> fds_;                             // by index in manifest_.files
  std::vector<std::vector<int64_t>> saved_offsets_;  // each saved stage's units' starts in its layout
  int same_layout_stage_ = -1;  // the saved stage whose layout is this rank's (-1: none; read by parameter)
  std::vector<ParamTable> saved_tables_;  // each saved stage's table (slice 0), when reading by parameter
};

// Every rank learns the first non-empty problem of any rank and throws it, so all ranks stop together.
void agree_on_all(comm::Communicator& world, const std::string& mine) {
  for (const std::string& problem : gather_strings(world, mine.substr(0, kSlot))) {
    if (!problem.empty()) throw CheckpointError(problem);
  }
}

// LoCo's kept errors: restored when the checkpoint holds this rank's file from a run with the same layout
// (world size, nodes, buckets, block); otherwise they start from zero. Returns a note for the start-up output
// saying which ("" when restored, or when neither side uses LoCo).
std::string load_feedback(ZeroEngine& engine, comm::Communicator& world, const fs::path& path,
                          const CheckpointManifest& manifest) {
  const std::string zero = "LoCo's kept errors start from zero: ";
  if (engine.feedback_bytes() == 0) {
    if (manifest.feedback_files.empty()) return "";
    return "the checkpoint's LoCo kept errors are not used (this run has no qgZ error feedback)";
  }
  if (manifest.feedback_files.empty()) return zero + "the checkpoint was saved without them";
  if (manifest.world_size != world.size()) {
    return zero + "the checkpoint was saved at " + std::to_string(manifest.world_size) +
           " ranks, this run has " + std::to_string(world.size());
  }
  if (manifest.feedback_layout != engine.feedback_layout()) {
    return zero + "they were saved for " + manifest.feedback_layout + "; this run has " +
           engine.feedback_layout();
  }
  const CheckpointManifest::ShardFile& file = manifest.feedback_files[world.rank()];
  std::string problem = check_shard(path, file);
  std::vector<uint8_t> kept(engine.feedback_bytes());
  if (problem.empty()) {
    std::ifstream in(path / file.name, std::ios::binary);
    in.read(reinterpret_cast<char*>(kept.data()), std::streamsize(kept.size()));
    if (!in) problem = (path / file.name).string() + ": short read; load an earlier checkpoint";
  }
  agree_on_all(world, problem);
  engine.restore_feedback(kept);
  return "";
}

}  // namespace

bool checkpoint_exists(comm::Communicator& world, const std::string& dir) {
  std::error_code ignored;
  char exists = 0;
  if (world.rank() == 0) {
    exists =
        fs::exists(fs::path(dir) / "latest", ignored) || fs::exists(fs::path(dir) / "manifest.json", ignored);
  }
  world.broadcast(&exists, 1, 0, comm::Phase::kOther).wait();
  return exists != 0;
}

LoadedCheckpoint load_checkpoint(ZeroEngine& engine, comm::Communicator& world, const std::string& dir,
                                 bool weights_only) {
  const auto [path, manifest] = read_manifest(dir);
  const std::string manifest_path = (path / "manifest.json").string();
  LoadedCheckpoint loaded = read_position(manifest, manifest_path, engine.model());
  loaded.path = path.string();

  agree_shards_intact(world, path, manifest);
  {
    OwnedRangeReader reader(path, manifest, engine, weights_only);
    engine.write_state([&](int64_t begin, int64_t n, float* master, float* m, float* v) {
      reader.read(begin, n, master, m, v);
    });
  }
  if (!weights_only) {
    engine.set_training_state(loaded.applied_steps, loaded.scaler);
    loaded.feedback_note = load_feedback(engine, world, path, manifest);
  }
  world.barrier().wait();
  return loaded;
}

}  // namespace gpt
