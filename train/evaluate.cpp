#include "train/evaluate.h"

#include "train/runtime.h"

namespace loom {

EvalLoss evaluate_loss(Task& task, const Config& config, const Mesh& mesh, torch::Device device) {
  torch::NoGradGuard no_grad;
  task.model().eval();
  AutocastGuard autocast(config.precision, device);
  const int64_t micro = config.micro_batch_size(mesh.dp());
  const int64_t accumulation = config.accumulation_steps(mesh.dp());
  double loss_sum = 0;  // sum over tokens
  int64_t tokens = 0;
  for (int64_t b = 0; b < config.train.eval_batches; ++b) {
    const int64_t first = b * config.train.batch_size + mesh.coords().dp * micro * accumulation;
    for (int64_t m = 0; m < accumulation; ++m) {
      const auto batch = task.eval_batch(first + m * micro, micro);
      const int64_t n = batch_tokens(batch);
      loss_sum += task.loss(batch, device, /*label_smoothing=*/0.0).item<double>() * static_cast<double>(n);
      tokens += n;
    }
  }
  auto sums = torch::tensor({loss_sum, static_cast<double>(tokens)}, torch::kDouble);
  mesh.dp_group().all_reduce(sums);
  const double total_tokens = sums[1].item<double>();
  return {total_tokens > 0 ? sums[0].item<double>() / total_tokens : 0.0, static_cast<int64_t>(total_tokens)};
}

}  // namespace loom
