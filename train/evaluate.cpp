#include "train/evaluate.h"

#include <algorithm>

#include "data/corpus/batch_slices.h"
#include "parallel/pipeline_schedule.h"
#include "train/pipeline_runner.h"
#include "train/runtime.h"

namespace loom {

EvalLoss evaluate_loss(Task& task, const Config& config, const Mesh& mesh, torch::Device device) {
  torch::NoGradGuard no_grad;
  task.model().eval();
  AutocastGuard autocast(config.precision, device);
  const int64_t accumulation = config.accumulation_steps(mesh.dp());
  const int64_t batch_size = config.train.batch_size;
  int64_t sequences = config.train.eval_batches * batch_size;
  if (task.eval_size() > 0) sequences = std::min(sequences, task.eval_size());  // a fixed set: each at most once
  task.take_eval_metric_sums();  // from zero
  double loss_sum = 0;  // sum over tokens
  int64_t tokens = 0;
  for (int64_t start = 0; start < sequences; start += batch_size) {
    const int64_t size = std::min(batch_size, sequences - start);
    std::vector<TaskBatch> pipelined;  // with pipeline stages: the batch's micro-batches, run together
    for (const auto& slice : micro_batches(size, mesh.dp(), mesh.coord(kDpAxes), accumulation)) {
      if (slice.count == 0) continue;  // a short last batch
      const auto batch = task.eval_batch(start + slice.first, slice.count);
      const int64_t n = batch.loss_tokens();
      if (mesh.pp() > 1) {
        pipelined.push_back(batch);
        if (mesh.last_stage()) tokens += n;  // the loss is known on the last stage
        continue;
      }
      loss_sum += task.loss(batch, device, /*label_smoothing=*/0.0).item<double>() * static_cast<double>(n);
      tokens += n;
    }
    if (!pipelined.empty()) {
      PipelineStep forwards;
      forwards.train = false;
      loss_sum += run_pipeline(task, pipelined, mesh, config.parallel.pp_schedule, device, forwards).item<double>();
    }
  }
  std::vector<double> values = {loss_sum, static_cast<double>(tokens)};
  const auto names = task.eval_metric_names();
  auto metric_sums = task.take_eval_metric_sums();
  metric_sums.resize(names.size());  // a stage without the head counted nothing
  values.insert(values.end(), metric_sums.begin(), metric_sums.end());
  auto sums = torch::tensor(values, torch::kDouble);
  mesh.host_group(kDataParallelAxes).all_reduce(sums);  // context-parallel ranks each count their part
  if (mesh.pp() > 1) mesh.host_group(MeshAxis::kPp).all_reduce(sums);  // only the last stage has counted
  const double total_tokens = sums[1].item<double>();
  EvalLoss out{total_tokens > 0 ? sums[0].item<double>() / total_tokens : 0.0, static_cast<int64_t>(total_tokens), {}};
  for (size_t i = 0; i < names.size(); ++i)
    out.metrics.emplace_back(names[i], total_tokens > 0 ? sums[static_cast<int64_t>(2 + i)].item<double>() / total_tokens : 0.0);
  return out;
}

}  // namespace loom
