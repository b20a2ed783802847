// Runs one step's micro-batches through this rank's pipeline stage (parallel.pp > 1): the actions of the
// schedule (parallel/pipeline_schedule.h) in order, the stage's outputs (a short list: the GPT's hidden
// (B, T, C), or this TP rank's (B, T / tp, C) under sequence parallelism; the encoder-decoder's source and
// target sides) sent to the next stage after each forward and their gradients sent back after each
// backward, point-to-point over the PP group.
// Sends are asynchronous (a stage never waits for its neighbour to take a message); receives block, and
// the time spent blocked is the stage's idle time, the pipeline bubble measured.
// What a micro-batch's forward is belongs to the Task (Task::stage_forward); what the last stage
// backpropagates (loss scaling, the micro-batch's weight in the global mean) to the caller. A parameter the
// first and the last stage both hold (StagedModel::stage_tied_embedding: the tied token embedding) has its two
// gradients summed here, over the mesh's embedding group, once the step's backwards are done.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/unit_gathers.h"
#include "train/task.h"

namespace loom {

struct PipelineStep {
  bool train = true;  // false: forwards only (evaluation, under NoGradGuard)
  double label_smoothing = 0;
  // The tokens micro-batch m's loss counts for (0: a stand-in run for an empty slice of the batch); empty:
  // each batch's loss_tokens().
  std::vector<int64_t> micro_tokens;
  // Last stage, training: the scalar to backpropagate for micro-batch m's mean loss.
  std::function<torch::Tensor(const torch::Tensor& loss, int64_t micro)> backward_loss;
  // Training: called once this stage's gradients may start their data-parallel reduction: just before its
  // last backward of the step (the reduction overlaps it), or, with a stage-tied parameter, only after the
  // two stages' gradients of it are summed (it is not complete before). May be empty.
  std::function<void()> start_gradient_sync;
  // Training: called after each backward (GradientSync::end_backward). May be empty.
  std::function<void()> end_backward;
  // Training: called before each forward and backward with what this stage runs after it (ZeRO-3 prefetches
  // its parameters across the two). May be empty.
  std::function<void(NextPass)> next_pass;
  // Training: called before each forward and each backward with its micro-batch (MoE layers take that
  // micro-batch's aux-loss weight, models/moe.h). May be empty.
  std::function<void(int64_t micro)> before_pass;
};

struct PipelineStats {
  double forward_s = 0;   // in the stage's own forwards (sends included: they only start)
  double backward_s = 0;  // in its own backwards
  double idle_s = 0;      // blocked waiting for a neighbour's activations or gradients
  double busy_s() const { return forward_s + backward_s; }
  double idle_fraction() const { return busy_s() + idle_s > 0 ? idle_s / (busy_s() + idle_s) : 0.0; }
};

// Returns the sum over micro-batches of mean loss x their tokens on the last stage (a double scalar on
// `device`, not read back), zero on the others. The stages talk over the mesh's pipeline group.
torch::Tensor run_pipeline(Task& task, const std::vector<TaskBatch>& batches, const Mesh& mesh,
                           PipelineSchedule schedule, torch::Device device, const PipelineStep& step,
                           PipelineStats* stats = nullptr);

}  // namespace loom
