// The training loop. run() reads as the story of training: load or resume, then per step: global batch
// -> this DP rank's micro-batches -> backward (gradients all-reduced in buckets as they are ready) ->
// clip -> AdamW at the scheduled LR -> metrics -> maybe eval -> maybe checkpoint; a stop signal on any
// rank ends it after the step with a checkpoint. With parallel.pp > 1 the micro-batches go through the
// pipeline schedule instead (train/pipeline_runner.h). What is trained (the GPT on token windows, the
// encoder-decoder on pairs) is the Task's business (train/task.h); the process groups are the Mesh's
// (parallel/mesh.h); the loss of a step is the mean over every token of the global batch.
#pragma once
#include <torch/torch.h>

#include <memory>

#include "core/config.h"
#include "core/fault_injection.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/process_group.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/moe_balance.h"
#include "train/nonfinite_guard.h"
#include "train/pipeline_runner.h"
#include "train/run_plan.h"
#include "train/step_phases.h"
#include "train/task.h"
#include "train/throughput.h"

namespace loom {

struct StepResult {
  double loss = 0;       // mean over the global batch
  double lr = 0;         // the scheduled learning rate the step used
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // no update: non-finite loss or gradients (train/nonfinite_guard.h), or fp16 overflow
  int64_t tokens = 0;    // in the global batch
  int64_t loss_tokens = 0;  // the targets its loss averages over: tokens, less those a loss mask leaves out
};

class Trainer {
 public:
  // The run `plan` resolved for this job's world (train/run_plan.h); refused before anything is built when a
  // rank's stage cannot fit. data: the task's training data, data.train or synthetic (`loom bench`).
  Trainer(RunPlan plan, const ProcessGroup& processes, TaskData data = TaskData::kTraining);
  TrainState run();

  // One optimizer step at the scheduled learning rate: what run() repeats between its bookkeeping.
  StepResult step();
  // Where the last step's time went; with synchronize_phases(true) a GPU is waited for at each phase end.
  const StepPhases& last_phases() const { return phases_; }
  // Pipeline runs: this stage's busy and idle (bubble) time, summed over the steps since the last reset.
  const PipelineStats& pipeline_stats() const { return pipeline_stats_; }
  void reset_pipeline_stats() { pipeline_stats_ = {}; }
  void synchronize_phases(bool on) { synchronize_phases_ = on; }

  // the mean validation loss (and the task's other measures) over train.eval_batches batches of
  // train.batch_size sequences
  EvalLoss evaluate();
  Task& task() { return *task_; }
  const Config& config() const { return config_; }
  const RunPlan& plan() const { return plan_; }
  const Mesh& mesh() const { return mesh_; }
  torch::Device device() const { return device_; }

 private:
  // What the forward and backward passes of a step's micro-batches leave for the rest of the step.
  struct Backward {
    double loss = 0;            // the global batch's mean loss
    double local_loss_sum = 0;  // this rank's share of it: summed token losses (non-finite: a bad step)
    int64_t tokens = 0;         // in the global batch
    int64_t loss_tokens = 0;    // the targets its loss averaged over (fewer than tokens with SFT loss masks)
  };
  Backward forward_backward(PhaseClock& clock, const StepFaults& faults);
  // The micro-batches through this rank's pipeline stage (parallel.pp > 1): this rank's sum of loss x tokens.
  // moe_tokens: the aux losses' weights (MoeBalance::whole_sequence_tokens).
  torch::Tensor pipeline_forward_backward(const std::vector<TaskBatch>& batches, const std::vector<int64_t>& tokens,
                                          const std::vector<int64_t>& moe_tokens, double weight_per_token);
  // Over every rank's share of the gradients: ZeRO shards over DP, TP shards, pipeline stages.
  GradientNorm global_gradient_norm();

  void resume_or_start();
  bool any_rank_stopping();
  void count_source_tokens();  // a mixture's tokens per source of this step's global batch
  void log_step(const StepResult& result);
  void maybe_evaluate(bool final_step);
  void checkpoint();
  CheckpointParts checkpoint_parts();
  bool is_leader() const { return mesh_.rank() == 0; }

  const RunPlan plan_;
  const Config& config_;  // plan_'s
  torch::Device device_;
  Mesh mesh_;  // every process group: the world, dp, tp, pp, cp
  ContextParallelism context_parallelism_;  // the model's sequence split over the cp group; its ring's waits
  std::unique_ptr<Task> task_;
  std::unique_ptr<GradientSync> gradient_sync_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  // Per optimizer tensor, for the gradient norm: its elements split over TP, and those another stage counts.
  std::vector<std::vector<ElementRange>> tp_sharded_, duplicated_;
  LrSchedule schedule_;
  LossScaler loss_scaler_;
  NonFiniteGuard nonfinite_guard_;
  std::unique_ptr<MoeBalance> moe_;  // model.moe: the aux losses' weights, expert bias, routing metrics

  TrainState state_;
  int64_t last_checkpoint_step_ = -1;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 only
  ThroughputMeter throughput_;
  StepPhases phases_;
  bool synchronize_phases_ = false;
  PipelineStats pipeline_stats_;
};

}  // namespace loom
