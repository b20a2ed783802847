// Cross-entropy with label smoothing and an ignore index, computed in fp32 whatever the logits' dtype:
//   loss_i = (1 - e) * (-log p_i[y_i]) + e * mean_v(-log p_i[v]),  averaged over targets != ignore_index.
// Matches torch.nn.functional.cross_entropy(logits, y, label_smoothing=e, ignore_index=i).
#pragma once
#include <torch/torch.h>

namespace loom {

constexpr int64_t kIgnoreIndex = -100;

// logits: (N, V), targets: (N) int64 -> scalar mean loss (0 if every target is ignored).
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing = 0.0,
                            int64_t ignore_index = kIgnoreIndex);

}  // namespace loom
