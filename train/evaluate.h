// The validation loss, shared by the Trainer's periodic evaluation and `loom eval`: the mean cross-entropy
// per token over train.eval_batches global batches of train.batch_size sequences of the task's evaluation
// set (for the LM: consecutive windows of data.seq_len + 1 tokens, wrapping around the file), the same
// set whatever the parallel layout and micro-batch size. It neither trains nor touches RNG state.
#pragma once
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "parallel/mesh.h"
#include "train/task.h"

namespace loom {

struct EvalLoss {
  double loss = 0;     // mean per token
  int64_t tokens = 0;  // tokens it averages over, all ranks together
  // The task's other measures (Task::eval_metric_names), each its sum over the mesh / tokens.
  std::vector<std::pair<std::string, double>> metrics;
};

// Each DP rank of the mesh evaluates its slice in micro-batches; the mean is over the mesh's DP group.
// With pipeline stages the micro-batches go through the pipeline (forwards only) and the last stage's
// loss reaches every stage.
EvalLoss evaluate_loss(Task& task, const Config& config, const Mesh& mesh, torch::Device device);

}  // namespace loom
