#include "train/evaluate.h"

#include <algorithm>

#include "data/lm_sampler.h"
#include "optim/cross_entropy.h"
#include "train/runtime.h"

namespace loom {

double evaluate_loss(GptImpl& model, const TokenFile& data, const Config& config, const Mesh& mesh, torch::Device device) {
  torch::NoGradGuard no_grad;
  model.eval();
  AutocastGuard autocast(config.precision, device);
  const LmSampler sampler(static_cast<uint64_t>(config.run.seed), config.data.seq_len);  // eval windows ignore the seed
  const int64_t micro = config.micro_batch_size(mesh.dp());
  const int64_t accumulation = config.accumulation_steps(mesh.dp());
  double total = 0;
  for (int64_t b = 0; b < config.train.eval_batches; ++b) {
    const int64_t first = b * config.train.batch_size + mesh.coords().dp * micro * accumulation;
    for (int64_t m = 0; m < accumulation; ++m) {
      auto batch = sampler.eval_batch(data, first + m * micro, micro);
      auto logits = model.forward(batch.inputs.to(device));  // (B, T, V)
      total += cross_entropy(logits.flatten(0, 1), batch.targets.to(device).flatten(), 0.0, kIgnoreIndex,
                             model.tp_group())
                   .item<double>();
    }
  }
  const auto micro_batches = static_cast<double>(std::max<int64_t>(1, config.train.eval_batches * accumulation));
  auto mean = torch::tensor({total / micro_batches}, torch::kDouble);
  mesh.dp_group().all_reduce(mean);
  return mean.item<double>() / static_cast<double>(mesh.dp_group().size());
}

}  // namespace loom
