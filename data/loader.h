// The training and validation data loaders: fixed-length windows of token shards, served so that a run's
// global batches depend only on the seed and the global batch size G, never on how G is split into ranks
// and accumulation steps.
//
// Windows. Each shard (in the order given, normally sorted paths) is cut into windows of seq_len + 1
// tokens starting at multiples of seq_len: window k of a shard covers tokens [k*seq_len, k*seq_len +
// seq_len]. Consecutive windows share one token (the target of one window's last input is the next
// window's first input), no window crosses a shard boundary, and a shard's last (n-1) % seq_len tokens
// that do not fill a window are unused. Windows are numbered 0..N-1 across the shards in order.
//
// The stream. Stream position p (0, 1, 2, ...) holds window perm_e(p mod N) with epoch e = p / N, where
// perm_e is a seeded Fisher-Yates shuffle driven by splitmix64 of (seed, e), both written here so that
// the order is the same on every platform and standard library. Every block of N consecutive positions
// starting at a multiple of N is thus a permutation of all windows.
//
// Batches. Global batch s covers stream positions [s*G, (s+1)*G), G = micro_batch * accumulation_steps *
// world_size. Micro-step m of rank r takes the micro_batch positions starting at
// s*G + (m*world_size + r)*micro_batch. A checkpoint saves the stream offset s*G; resuming at another
// world size or accumulation split with the same G sees the same batches. The trainer advances s on every
// iteration, skipped optimizer steps included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt::data {

struct LoaderConfig {
  int seq_len = 0;
  int micro_batch = 0;
  int accumulation_steps = 1;
  int world_size = 1;
  int rank = 0;
  uint64_t seed = 0;
  // Use only the windows [begin, end) x (number of windows), in order (gpt_train's --split without
  // --valid-data-path carves the validation windows out of the same shards this way).
  double window_begin = 0.0, window_end = 1.0;
};

// The seeded permutation of [0, n) used for epoch `epoch`; exposed so tests can pin it down.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t epoch);

// Tokens of a list of shards, cut into windows as described above. Shared by both loaders.
class WindowSet {
 public:
  // Reads and validates every shard (DataError on a bad shard, or when no shard holds seq_len + 1 tokens).
  WindowSet(const std::vector<std::string>& shard_paths, int vocab_size, int seq_len);
  int64_t size() const { return static_cast<int64_t>(starts_.size()); }
  int seq_len() const { return seq_len_; }
  // Keeps only the windows [floor(n begin), floor(n end)) of the n, in order; DataError if none remain.
  void keep_fraction(double begin, double end, const std::string& what);
  // Writes window w's inputs (its first seq_len tokens) and targets (its last seq_len tokens).
  void copy(int64_t window, int32_t* inputs, int32_t* targets) const;

 private:
  int seq_len_;
  std::vector<uint16_t> tokens_;  // all shards back to back
  std::vector<int64_t> starts_;   // window -> offset of its first token in tokens_
};

class TrainLoader {
 public:
  // Throws DataError for a bad shard or too little data, std::invalid_argument for a bad config.
  TrainLoader(const std::vector<std::string>& shard_paths, int vocab_size, const LoaderConfig& config);

  int64_t num_windows() const { return windows_.size(); }
  // G = micro_batch * accumulation_steps * world_size windows per global batch.
  int64_t global_batch() const { return global_batch_; }
  // The stream offset a checkpoint stores after `global_steps` global batches, and back.
  int64_t stream_offset(int64_t global_steps) const { return global_steps * global_batch_; }

  // The window at a stream position.
  int64_t window_at(int64_t stream_position);

  // This rank's micro-step `micro_step` of global batch `global_step`: inputs and targets are
  // [micro_batch * seq_len] row-major, stream_positions [micro_batch] the global stream index of each
  // row's window (the key for anything that must follow a sample, such as dropout masks).
  void load(int64_t global_step, int micro_step, int32_t* inputs, int32_t* targets,
            int64_t* stream_positions);
  // The same for any run of `count` consecutive stream positions starting at `first_position`.
  void load_positions(int64_t first_position, int count, int32_t* inputs, int32_t* targets,
                      int64_t* stream_positions);

 private:
  LoaderConfig config_;
  WindowSet windows_;
  int64_t global_batch_;
  // Permutation of the epoch last used: a cache, the results depend only on the stream position.
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
};

// Validation windows in order, without shuffling: batch b holds windows [b*batch, (b+1)*batch).
class ValidLoader {
 public:
  ValidLoader(const std::vector<std::string>& shard_paths, int vocab_size, int seq_len,
              double window_begin = 0.0, double window_end = 1.0);
  int64_t num_windows() const { return windows_.size(); }
  int64_t num_batches(int batch) const { return batch > 0 ? windows_.size() / batch : 0; }
  // Throws std::out_of_range unless 0 <= batch_index < num_batches(batch).
  void load(int64_t batch_index, int batch, int32_t* inputs, int32_t* targets) const;

 private:
  WindowSet windows_;
};

}  // namespace gpt::data
