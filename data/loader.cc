// Windows over token shards, the seeded stream of windows, and the train/validation loaders (loader.h).
#include "data/loader.h"

#include <cmath>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "data/shard.h"

namespace gpt::data {

namespace {

// splitmix64's output function: a bijective mixer of 64-bit values.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64 (Steele, Lea, Flood 2014): small, fast, and fully specified, so every platform draws the same
// numbers, unlike std:: distributions whose algorithms are implementation-defined.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n) without modulo bias: reject the top 2^64 mod n values.
  uint64_t below(uint64_t n) {
    const uint64_t rejected = (0 - n) % n;
    for (;;) {
      const uint64_t x = next();
      if (x >= rejected) return x % n;
    }
  }

 private:
  uint64_t state_;
};

std::string describe(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return paths[0];
  return paths.front() + " (and " + std::to_string(paths.size() - 1) + " more shards)";
}

}  // namespace

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> permutation(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) permutation[i] = i;
  // Mixing (seed, epoch) before seeding keeps epochs' streams unrelated: seeding with seed + epoch would
  // make epoch e's draws those of epoch 0 shifted by e.
  SplitMix64 rng(mix64(mix64(seed) + epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(permutation[i], permutation[rng.below(static_cast<uint64_t>(i) + 1)]);
  }
  return permutation;
}

WindowSet::WindowSet(const std::vector<std::string>& shard_paths, int vocab_size, int seq_len)
    : seq_len_(seq_len) {
  if (seq_len <= 0) throw std::invalid_argument("WindowSet: seq_len must be positive");
  if (shard_paths.empty()) throw std::invalid_argument("WindowSet: no shard paths");
  int64_t longest = 0;
  for (const std::string& path : shard_paths) {
    const std::vector<uint16_t> shard = read_shard(path, vocab_size);
    const auto n = static_cast<int64_t>(shard.size());
    longest = std::max(longest, n);
    const auto base = static_cast<int64_t>(tokens_.size());
    for (int64_t start = 0; start + seq_len + 1 <= n; start += seq_len) starts_.push_back(base + start);
    tokens_.insert(tokens_.end(), shard.begin(), shard.end());
  }
  if (starts_.empty()) {
    throw DataError(describe(shard_paths) + ": the longest shard holds " + std::to_string(longest) +
                    " tokens, fewer than the " + std::to_string(seq_len + 1) +
                    " (sequence length + 1) one window needs; use a shorter --seq-length or more text");
  }
}

void WindowSet::keep_fraction(double begin, double end, const std::string& what) {
  if (begin == 0.0 && end == 1.0) return;
  const auto n = static_cast<double>(starts_.size());
  const auto first = static_cast<size_t>(std::floor(n * begin)),
             last = static_cast<size_t>(std::floor(n * end));
  if (first >= last) {
    throw DataError(what + ": the split leaves no window of the " + std::to_string(starts_.size()) +
                    " for this part; change --split or give --valid-data-path");
  }
  starts_ = std::vector<int64_t>(starts_.begin() + first, starts_.begin() + last);
}

void WindowSet::copy(int64_t window, int32_t* inputs, int32_t* targets) const {
  const uint16_t* tokens = tokens_.data() + starts_.at(static_cast<size_t>(window));
  for (int t = 0; t < seq_len_; ++t) {
    inputs[t] = tokens[t];
    targets[t] = tokens[t + 1];
  }
}

TrainLoader::TrainLoader(const std::vector<std::string>& shard_paths, int vocab_size,
                         const LoaderConfig& config)
    : config_(config), windows_(shard_paths, vocab_size, config.seq_len) {
  windows_.keep_fraction(config.window_begin, config.window_end, "training data");
  if (config.micro_batch <= 0 || config.accumulation_steps <= 0 || config.world_size <= 0 ||
      config.rank < 0 || config.rank >= config.world_size) {
    throw std::invalid_argument(
        "TrainLoader: need micro_batch, accumulation_steps, world_size > 0 and 0 <= "
        "rank < world_size");
  }
  global_batch_ = int64_t{config.micro_batch} * config.accumulation_steps * config.world_size;
}

int64_t TrainLoader::window_at(int64_t stream_position) {
  if (stream_position < 0) throw std::out_of_range("TrainLoader: negative stream position");
  const int64_t n = windows_.size();
  const int64_t epoch = stream_position / n;
  if (epoch != cached_epoch_) {
    permutation_ = seeded_permutation(n, config_.seed, static_cast<uint64_t>(epoch));
    cached_epoch_ = epoch;
  }
  return permutation_[static_cast<size_t>(stream_position % n)];
}

void TrainLoader::load_positions(int64_t first_position, int count, int32_t* inputs, int32_t* targets,
                                 int64_t* stream_positions) {
  const int seq_len = windows_.seq_len();
  for (int i = 0; i < count; ++i) {
    const int64_t position = first_position + i;
    windows_.copy(window_at(position), inputs + int64_t{i} * seq_len, targets + int64_t{i} * seq_len);
    if (stream_positions) stream_positions[i] = position;
  }
}

void TrainLoader::load(int64_t global_step, int micro_step, int32_t* inputs, int32_t* targets,
                       int64_t* stream_positions) {
  if (global_step < 0 || micro_step < 0 || micro_step >= config_.accumulation_steps) {
    throw std::out_of_range(
        "TrainLoader::load: global_step must be >= 0 and micro_step in [0, "
        "accumulation_steps)");
  }
  const int64_t first = global_step * global_batch_ +
                        (int64_t{micro_step} * config_.world_size + config_.rank) * config_.micro_batch;
  load_positions(first, config_.micro_batch, inputs, targets, stream_positions);
}

ValidLoader::ValidLoader(const std::vector<std::string>& shard_paths, int vocab_size, int seq_len,
                         double window_begin, double window_end)
    : windows_(shard_paths, vocab_size, seq_len) {
  windows_.keep_fraction(window_begin, window_end, "validation data");
}

void ValidLoader::load(int64_t batch_index, int batch, int32_t* inputs, int32_t* targets) const {
  if (batch <= 0 || batch_index < 0 || batch_index >= num_batches(batch)) {
    throw std::out_of_range("ValidLoader::load: batch index " + std::to_string(batch_index) +
                            " outside [0, " + std::to_string(batch <= 0 ? 0 : num_batches(batch)) + ")");
  }
  const int seq_len = windows_.seq_len();
  for (int i = 0; i < batch; ++i) {
    windows_.copy(batch_index * batch + i, inputs + int64_t{i} * seq_len, targets + int64_t{i} * seq_len);
  }
}

}  // namespace gpt::data
