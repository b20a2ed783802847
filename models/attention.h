// Multi-head self-attention with a fused QKV projection and an optional KV cache for generation.
// Shapes: B batch, T new positions, S cached + new positions, H heads, D head size, C = H * D.
#pragma once
#include <torch/torch.h>

namespace loom {

// Keys and values of the positions seen so far, per layer: (B, H, S, D) each; empty before the first call.
struct KVCache {
  torch::Tensor k;
  torch::Tensor v;
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

struct AttentionOptions {
  int64_t d_model = 0;
  int64_t n_heads = 0;
  double dropout = 0.0;
  bool causal = true;
  double init_std = 0.02;
  double out_init_std = 0.02;  // residual projection (GPT-2: init_std / sqrt(2 * n_layers))
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& options);

  // x: (B, T, C) -> (B, T, C). With a cache, x holds the positions after the cached ones and the cache grows.
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr);

 private:
  AttentionOptions options_;
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear out_{nullptr};
};
TORCH_MODULE(Attention);

}  // namespace loom
