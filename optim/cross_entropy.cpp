#include "optim/cross_entropy.h"

namespace loom {

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing,
                            int64_t ignore_index) {
  auto log_probs = torch::log_softmax(logits.to(torch::kFloat), /*dim=*/-1);  // (N, V)
  auto keep = targets != ignore_index;                                        // (N)
  auto safe_targets = targets.masked_fill(~keep, 0);
  auto nll = -log_probs.gather(1, safe_targets.unsqueeze(1)).squeeze(1);  // (N)
  auto per_token = nll;
  if (label_smoothing > 0) per_token = (1.0 - label_smoothing) * nll - label_smoothing * log_probs.mean(-1);
  auto weights = keep.to(torch::kFloat);
  return (per_token * weights).sum() / weights.sum().clamp_min(1.0);
}

}  // namespace loom
