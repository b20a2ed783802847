// A pre-norm Transformer block: x + attn(norm1(x)), then x + mlp(norm2(x)), dropout on each branch. The
// norms are LayerNorm or RMSNorm (named ln1 and ln2 either way, so checkpoints keep their names).
#pragma once
#include <torch/torch.h>

#include "models/attention.h"
#include "models/layers.h"
#include "models/mlp.h"

namespace loom {

struct BlockOptions {
  AttentionOptions attention;
  MlpOptions mlp;
  NormOptions norm;
  double dropout = 0.0;
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr);  // (B, T, C) -> (B, T, C)

 private:
  Norm ln1_{nullptr}, ln2_{nullptr};
  Attention attention_{nullptr};
  Mlp mlp_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace loom
