// A pre-LayerNorm Transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)), dropout on each branch.
#pragma once
#include <torch/torch.h>

#include "models/attention.h"
#include "models/mlp.h"

namespace loom {

struct BlockOptions {
  AttentionOptions attention;
  MlpOptions mlp;
  double dropout = 0.0;
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr);  // (B, T, C) -> (B, T, C)

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  Attention attention_{nullptr};
  Mlp mlp_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace loom
