#include "models/moe_router.h"

#include <cmath>

#include "core/error.h"
#include "parallel/context_parallel_layout.h"

namespace loom {

Routing route(const torch::Tensor& logits, MoeRouter router, int64_t top_k, bool normalize,
              const torch::Tensor& bias) {
  TORCH_CHECK(logits.dim() == 2, "route: logits must be (tokens, experts)");
  TORCH_CHECK(top_k >= 1 && top_k <= logits.size(1), "route: top_k must be in [1, experts]");
  Routing r;
  torch::Tensor scores;  // what the selection ranks (before the bias) and the weights are taken from
  switch (router) {
    case MoeRouter::kTopkSoftmax:
      scores = logits;
      r.probs = torch::softmax(logits, -1);
      break;
    case MoeRouter::kSoftmaxTopk:
      scores = torch::softmax(logits, -1);
      r.probs = scores;
      break;
    case MoeRouter::kSigmoid:
      scores = torch::sigmoid(logits);
      r.probs = scores / scores.sum(-1, true);
      break;
  }
  {
    torch::NoGradGuard no_grad;
    const auto ranked = bias.defined() ? scores + bias.to(scores.dtype()) : scores;
    r.experts = std::get<1>(ranked.topk(top_k, -1, /*largest=*/true, /*sorted=*/true));
  }
  auto chosen = scores.gather(-1, r.experts);
  if (router == MoeRouter::kTopkSoftmax) {
    r.weights = torch::softmax(chosen, -1);
  } else {
    r.weights = normalize ? chosen / chosen.sum(-1, true) : chosen;
  }
  return r;
}

torch::Tensor expert_load(const torch::Tensor& experts, int64_t num_experts) {
  return torch::bincount(experts.reshape(-1), {}, num_experts);
}

torch::Tensor load_balancing_loss(const torch::Tensor& probs, const torch::Tensor& experts) {
  const int64_t N = probs.size(0), E = probs.size(1), k = experts.size(1);
  const auto share = expert_load(experts, E).to(probs.dtype()) / static_cast<double>(N * k);  // f_e
  return static_cast<double>(E) * (share * probs.mean(0)).sum();
}

torch::Tensor load_balancing_loss(const torch::Tensor& probs, const torch::Tensor& load, const torch::Tensor& tokens,
                                  int64_t top_k) {
  const int64_t E = probs.size(1);
  const auto n = tokens.to(probs.dtype());
  const auto share = load.to(probs.dtype()) / (n * static_cast<double>(top_k));  // f_e over all ranks
  return static_cast<double>(E) * (share * (probs.sum(0) / n)).sum();
}

torch::Tensor router_z_loss(const torch::Tensor& logits) { return torch::logsumexp(logits, -1).square().mean(); }

torch::Tensor router_z_loss(const torch::Tensor& logits, const torch::Tensor& tokens) {
  return torch::logsumexp(logits, -1).square().sum() / tokens.to(logits.dtype());
}

torch::Tensor updated_expert_bias(const torch::Tensor& bias, const torch::Tensor& load, double rate) {
  const auto l = load.to(torch::kDouble);
  return bias + (rate * torch::sign(l.mean() - l)).to(bias.dtype()).to(bias.device());
}

int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t top_k, int64_t num_experts) {
  return static_cast<int64_t>(
      std::ceil(capacity_factor * static_cast<double>(tokens * top_k) / static_cast<double>(num_experts)));
}

torch::Tensor capacity_keep(const torch::Tensor& experts, int64_t num_experts, int64_t capacity) {
  const auto flat = experts.reshape(-1);  // token order, then choice order
  const auto one_hot = torch::one_hot(flat, num_experts);  // (N k, E)
  // The slot's place in its expert's queue: how many slots before it (and it) went to the same expert.
  const auto place = one_hot.cumsum(0).gather(1, flat.unsqueeze(1)).squeeze(1) - 1;
  return (place < capacity).reshape(experts.sizes());
}

torch::Tensor capacity_keep_over_sequences(const torch::Tensor& experts, int64_t batch, int64_t num_experts,
                                           double capacity_factor, Communicator& cp_group) {
  const int64_t cp = cp_group.size(), N = experts.size(0), k = experts.size(1);
  TORCH_CHECK(batch > 0 && N % batch == 0, "capacity_keep_over_sequences: ", N, " tokens are not ", batch, " rows");
  auto gathered = torch::empty({cp * N, k}, experts.options().dtype(torch::kLong));
  cp_group.all_gather(experts.to(torch::kLong).contiguous(), gathered);
  std::vector<torch::Tensor> parts;  // rank r's (batch, local_len, k)
  for (int64_t r = 0; r < cp; ++r) parts.push_back(gathered.narrow(0, r * N, N).view({batch, N / batch, k}));
  const auto whole = cp_unsplit(parts, 1);
  const auto keep = capacity_keep(whole.reshape({-1, k}), num_experts,
                                  expert_capacity(capacity_factor, cp * N, k, num_experts));
  return cp_split(keep.view({batch, -1, k}), 1, cp, cp_group.rank()).reshape({N, k});
}

}  // namespace loom
