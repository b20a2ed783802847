// Cross-entropy with label smoothing and an ignore index, computed in fp32 whatever the logits' dtype:
//   loss_i = (1 - e) * (-log p_i[y_i]) + e * mean_v(-log p_i[v]),  averaged over targets != ignore_index.
// Matches torch.nn.functional.cross_entropy(logits, y, label_smoothing=e, ignore_index=i).
// Vocab-parallel (Megatron): given a TP group of more than one rank, logits holds this rank's columns
// shard_range(V, tp, rank) of the vocabulary; the softmax normalizer, the target logit and the mean logit
// are summed over the group, so no rank ever holds the (N, V) logits, and every rank returns the same loss
// and the gradient of its own columns.
#pragma once
#include <torch/torch.h>

#include "parallel/communicator.h"

namespace loom {

constexpr int64_t kIgnoreIndex = -100;

// logits: (N, V) or (N, V_r) with `tp`, targets: (N) int64 -> scalar mean loss (0 if every target is ignored).
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing = 0.0,
                            int64_t ignore_index = kIgnoreIndex, Communicator* tp = nullptr);

}  // namespace loom
