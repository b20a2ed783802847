#include "optim/cross_entropy.h"

#include "parallel/tensor_parallel.h"

namespace loom {
namespace {

// (N, V_r) shards -> per-token (N) losses before smoothing is weighed in: -log p[y] and, if `smoothing`,
// -mean_v log p[v].
std::pair<torch::Tensor, torch::Tensor> vocab_parallel_terms(const torch::Tensor& logits, const torch::Tensor& targets,
                                                             const torch::Tensor& keep, bool smoothing,
                                                             Communicator& tp) {
  auto vocab = torch::tensor({logits.size(1)}, logits.options().dtype(torch::kLong));  // NCCL takes device tensors
  tp.all_reduce(vocab);
  const int64_t V = vocab.item<int64_t>();
  const auto range = shard_range(V, tp.size(), tp.rank());
  // The max only keeps exp() in range; the loss does not depend on it, so it carries no gradient.
  auto max = std::get<0>(logits.detach().max(-1)).contiguous();  // (N)
  tp.all_reduce(max, ReduceOp::kMax);
  const auto shifted = logits - max.unsqueeze(1);                             // (N, V_r)
  const auto log_sum_exp = reduce_from_tp_region(shifted.exp().sum(-1), tp).log();  // (N)
  const auto local = targets - range.start;
  const auto mine = keep & (local >= 0) & (local < range.length);  // the target's column is on this rank
  const auto target_logit =
      reduce_from_tp_region(shifted.gather(1, local.masked_fill(~mine, 0).unsqueeze(1)).squeeze(1).masked_fill(~mine, 0.0), tp);
  if (!smoothing) return {log_sum_exp - target_logit, torch::Tensor()};
  const auto mean_logit = reduce_from_tp_region(shifted.sum(-1), tp) / static_cast<double>(V);
  return {log_sum_exp - target_logit, log_sum_exp - mean_logit};
}

}  // namespace

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing,
                            int64_t ignore_index, Communicator* tp) {
  auto keep = targets != ignore_index;  // (N)
  torch::Tensor nll, smooth;            // (N): -log p[y] and -mean_v log p[v]
  if (tp != nullptr && tp->size() > 1) {
    std::tie(nll, smooth) = vocab_parallel_terms(logits.to(torch::kFloat), targets, keep, label_smoothing > 0, *tp);
  } else {
    auto log_probs = torch::log_softmax(logits.to(torch::kFloat), /*dim=*/-1);  // (N, V)
    auto safe_targets = targets.masked_fill(~keep, 0);
    nll = -log_probs.gather(1, safe_targets.unsqueeze(1)).squeeze(1);
    if (label_smoothing > 0) smooth = -log_probs.mean(-1);
  }
  auto per_token = nll;
  if (label_smoothing > 0) per_token = (1.0 - label_smoothing) * nll + label_smoothing * smooth;
  auto weights = keep.to(torch::kFloat);
  return (per_token * weights).sum() / weights.sum().clamp_min(1.0);
}

}  // namespace loom
