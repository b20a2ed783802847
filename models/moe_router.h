// The pure functions of Mixture-of-Experts routing (models/moe.h uses them; tests/unit/test_moe.cpp holds
// each to its closed form): which experts each token goes to and with what weights, the load-balancing and
// z losses, the auxiliary-loss-free bias update and capacity dropping.
#pragma once
#include <torch/torch.h>

#include "core/config_enums.h"  // MoeRouter
#include "parallel/communicator.h"

namespace loom {

struct Routing {
  torch::Tensor experts;  // (N, k) int64, each token's experts, best first
  torch::Tensor weights;  // (N, k) the weights the experts' outputs are summed with (differentiable)
  torch::Tensor probs;    // (N, E) the router's probabilities the load-balancing loss averages
};

// logits: (N, E) -> the top-k experts of each token.
//   topk_softmax (Mixtral): the k largest logits, weights softmax over those k; probs softmax(logits).
//   softmax_topk (Qwen-MoE): p = softmax(logits), the k largest p, weights those p (/ their sum if normalize).
//   sigmoid (DeepSeek-V3): s = sigmoid(logits), the k largest s, weights those s (/ their sum if normalize);
//   probs s / sum_e s.
// bias (E, may be undefined): added to the scores (logits, p or s) for the selection only, never to the weights.
Routing route(const torch::Tensor& logits, MoeRouter router, int64_t top_k, bool normalize,
              const torch::Tensor& bias = {});

// Routed slots per expert: experts (N, k) -> (E) int64 counts.
torch::Tensor expert_load(const torch::Tensor& experts, int64_t num_experts);

// Switch/GShard's load-balancing loss, as Megatron: E * sum_e f_e * P_e, f_e = load_e / (N k) the share of
// the routed slots expert e got, P_e = mean over tokens of probs[:, e]. 1 when perfectly balanced.
// Differentiable through probs.
torch::Tensor load_balancing_loss(const torch::Tensor& probs, const torch::Tensor& experts);
// The same when the tokens are split over ranks (context parallelism): load (E) the routed slots per expert
// and `tokens` (a scalar tensor, no device wait) the token count of all the ranks together, probs this rank's (n, E). Returns this rank's part,
// E * sum_e f_e * (sum of this rank's probs[:, e]) / tokens: the parts sum to the loss over all the tokens,
// and so do their gradients.
torch::Tensor load_balancing_loss(const torch::Tensor& probs, const torch::Tensor& load, const torch::Tensor& tokens,
                                  int64_t top_k);

// ST-MoE's router z-loss: mean over tokens of logsumexp(logits)^2. With `tokens` (a scalar tensor) the sum
// over this rank's tokens divided by all the ranks' count (its part of the mean, as load_balancing_loss's).
torch::Tensor router_z_loss(const torch::Tensor& logits);
torch::Tensor router_z_loss(const torch::Tensor& logits, const torch::Tensor& tokens);

// The auxiliary-loss-free update (DeepSeek-V3): bias_e + rate * sign(mean load - load_e); an expert that got
// more than the mean is chosen less often next step. load: (E) any number type.
torch::Tensor updated_expert_bias(const torch::Tensor& bias, const torch::Tensor& load, double rate);

// Slots each expert takes with capacity factor cf over N tokens: ceil(cf * N * k / E).
int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t top_k, int64_t num_experts);
// Which of the (N, k) slots are kept: slots are served in token order (token 0's first, then its second
// choice, ..., then token 1's) and an expert's slots beyond `capacity` are dropped. (N, k) bool.
torch::Tensor capacity_keep(const torch::Tensor& experts, int64_t num_experts, int64_t capacity);
// The same under context parallelism, where each rank holds part of every sequence of the micro-batch
// (parallel/context_parallel_layout.h): experts is this rank's (batch * local_len, k) choices; the group's are
// gathered, served in token order over the whole sequences with the whole micro-batch's capacity, and this
// rank's part of the keep returned, so the drops are the single process's. One all-gather of N k int64.
torch::Tensor capacity_keep_over_sequences(const torch::Tensor& experts, int64_t batch, int64_t num_experts,
                                           double capacity_factor, Communicator& cp_group);

}  // namespace loom
