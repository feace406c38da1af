// The order in which a pipeline stage runs its micro-batches' forwards and backwards in one optimizer step,
// and a timeline of the whole pipeline under stated per-op times (its bubble, beside the formula).
//
// 1F1B (PipeDream-flush, Megatron's default): stage s of p runs min(p - s - 1, m) forwards to fill the
// pipeline, then alternates one forward and one backward, then drains the remaining backwards, so it keeps
// at most p - s micro-batches' activations at once (the first stage p). Interleaved (Megatron's
// --num-layers-per-virtual-pipeline-stage): each stage runs v model chunks (model/pipeline.h); micro-batches
// go through the chunks in groups of p, with (p - s - 1) x 2 + (v - 1) x p forwards of warm-up (all of them
// when m = p), which cuts the bubble from (p - 1)/(m + p - 1) to (p - 1)/(v m + p - 1) of the step.
#pragma once

#include <string>
#include <vector>

namespace gpt {

struct PipelineOp {
  enum Kind { kForward, kBackward };
  Kind kind = kForward;
  int micro_batch = 0;
  int chunk = 0;  // which of the stage's v chunks (0 .. v-1); the model's chunk is chunk x p + stage
  bool operator==(const PipelineOp&) const = default;
};

// Why m micro-batches per step cannot be scheduled on p stages with v chunks each (empty when they can):
// fewer micro-batches than stages leave a stage with nothing to overlap; interleaving takes micro-batches in
// groups of p (Megatron's rule).
std::string pipeline_schedule_problem(int stages, int virtual_stages, int micro_batches);

// Stage `stage`'s ops in the order it runs them: every micro-batch's forward and backward through each of
// its chunks (2 m v ops).
std::vector<PipelineOp> pipeline_schedule(int stages, int stage, int virtual_stages, int micro_batches);

// The most micro-batches whose forward through a chunk of this stage has run and whose backward through it
// has not, over the schedule: the activation sets the stage keeps at once for that chunk (chunk -1: the most
// for any one chunk).
int max_in_flight(const std::vector<PipelineOp>& schedule, int chunk = -1);

// The pipeline's timeline when every chunk's forward takes forward_s and its backward backward_s, and a
// message between stages takes no time: each op starts when its stage is free and its input is there (the
// previous chunk's forward, the next chunk's backward).
struct PipelineTimeline {
  struct Span {
    PipelineOp op;
    double start = 0, end = 0;
  };
  std::vector<std::vector<Span>> stages;  // each stage's ops, in its order
  double step = 0;                        // the last op's end
  // Each stage's idle share of the step (the bubble as that stage sees it), and their mean.
  std::vector<double> idle_share;
  double bubble = 0;
};
PipelineTimeline simulate_pipeline(int stages, int virtual_stages, int micro_batches, double forward_s,
                                   double backward_s);

// The bubble's share of the step by the formula: (p - 1) / (v m + p - 1).
double pipeline_bubble_formula(int stages, int virtual_stages, int micro_batches);

}  // namespace gpt
