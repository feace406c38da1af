// Pipeline schedules (1F1B and interleaved) and their timeline; see pipeline_schedule.h.
#include "zero/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace gpt {
namespace {

// 1F1B: warm-up forwards, then one forward and one backward at a time, then the remaining backwards.
std::vector<PipelineOp> one_forward_one_backward(int p, int s, int m) {
  const int warmup = std::min(p - s - 1, m);
  std::vector<PipelineOp> ops;
  int forwards = 0, backwards = 0;
  for (; forwards < warmup; ++forwards) ops.push_back({PipelineOp::kForward, forwards, 0});
  for (; forwards < m; ++forwards, ++backwards) {
    ops.push_back({PipelineOp::kForward, forwards, 0});
    ops.push_back({PipelineOp::kBackward, backwards, 0});
  }
  for (; backwards < m; ++backwards) ops.push_back({PipelineOp::kBackward, backwards, 0});
  return ops;
}

// Interleaved: the k-th forward (or backward) of the stage's m v is micro-batch (k / pv) p + k % p through
// chunk (k % pv) / p (the backwards through the chunks in reverse).
PipelineOp interleaved_op(PipelineOp::Kind kind, int k, int p, int v) {
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (kind == PipelineOp::kBackward) chunk = v - 1 - chunk;
  return {kind, (k / (p * v)) * p + k % p, chunk};
}

std::vector<PipelineOp> interleaved(int p, int s, int v, int m) {
  const int total = m * v;
  const int warmup = m == p ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
  std::vector<PipelineOp> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(interleaved_op(PipelineOp::kForward, k, p, v));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(interleaved_op(PipelineOp::kForward, k + warmup, p, v));
    ops.push_back(interleaved_op(PipelineOp::kBackward, k, p, v));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(interleaved_op(PipelineOp::kBackward, k, p, v));
  return ops;
}

}  // namespace

std::string pipeline_schedule_problem(int stages, int virtual_stages, int micro_batches) {
  const std::string p = std::to_string(stages), m = std::to_string(micro_batches);
  if (micro_batches < stages) {
    return m + " micro-batches per step are fewer than the " + p +
           " pipeline stages; raise --global-batch-size to at least " + p +
           " x micro-batch x data-parallel size";
  }
  if (virtual_stages > 1 && micro_batches % stages != 0) {
    return "the interleaved schedule takes micro-batches in groups of the " + p + " pipeline stages, got " +
           m +
           "; make the micro-batches per step (global batch / (micro-batch x data-parallel size)) a "
           "multiple of " +
           p;
  }
  return "";
}

std::vector<PipelineOp> pipeline_schedule(int stages, int stage, int virtual_stages, int micro_batches) {
  if (std::string problem = pipeline_schedule_problem(stages, virtual_stages, micro_batches);
      !problem.empty())
    throw std::invalid_argument(problem);
  return virtual_stages == 1 ? one_forward_one_backward(stages, stage, micro_batches)
                             : interleaved(stages, stage, virtual_stages, micro_batches);
}

int max_in_flight(const std::vector<PipelineOp>& schedule, int chunk) {
  std::map<int, int> open;  // per chunk
  int most = 0;
  for (const PipelineOp& op : schedule) {
    if (chunk >= 0 && op.chunk != chunk) continue;
    int& n = open[op.chunk];
    n += op.kind == PipelineOp::kForward ? 1 : -1;
    most = std::max(most, n);
  }
  return most;
}

PipelineTimeline simulate_pipeline(int p, int v, int m, double forward_s, double backward_s) {
  PipelineTimeline timeline;
  std::vector<std::vector<PipelineOp>> schedules;
  for (int s = 0; s < p; ++s) schedules.push_back(pipeline_schedule(p, s, v, m));
  timeline.stages.resize(size_t(p));
  // When each (kind, micro-batch, model chunk) finished.
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free_at(size_t(p), 0.0);
  const int chunks = p * v;
  for (size_t remaining = size_t(2 * m * v * p); remaining > 0;) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[size_t(s)] < schedules[size_t(s)].size()) {
        const PipelineOp& op = schedules[size_t(s)][next[size_t(s)]];
        const int chunk = op.chunk * p + s;
        const bool forward = op.kind == PipelineOp::kForward;
        double ready = free_at[size_t(s)];
        if (forward ? chunk > 0 : chunk + 1 < chunks) {  // the input from the neighbouring chunk
          auto it = done.find({op.kind, op.micro_batch, forward ? chunk - 1 : chunk + 1});
          if (it == done.end()) break;
          ready = std::max(ready, it->second);
        }
        const double end = ready + (forward ? forward_s : backward_s);
        done[{op.kind, op.micro_batch, chunk}] = end;
        timeline.stages[size_t(s)].push_back({op, ready, end});
        free_at[size_t(s)] = end;
        ++next[size_t(s)];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) throw std::logic_error("pipeline schedule deadlocks: no stage can run its next op");
  }
  timeline.step = *std::max_element(free_at.begin(), free_at.end());
  const double busy = double(m) * v * (forward_s + backward_s);
  for (int s = 0; s < p; ++s) {
    timeline.idle_share.push_back(timeline.step > 0 ? 1 - busy / timeline.step : 0);
    timeline.bubble += timeline.idle_share.back() / p;
  }
  return timeline;
}

double pipeline_bubble_formula(int stages, int virtual_stages, int micro_batches) {
  return double(stages - 1) / (double(virtual_stages) * micro_batches + stages - 1);
}

}  // namespace gpt
