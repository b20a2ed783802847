// A pre-norm Transformer block: x + attn(norm1(x)), then x + mlp(norm2(x)), dropout on each branch. The
// norms are LayerNorm or RMSNorm (named ln1 and ln2 either way, so checkpoints keep their names).
// With activation checkpointing (training only, no KV cache) the block, or only its MLP branch, keeps
// just its input for backward and is recomputed there (models/recompute.h).
#pragma once
#include <torch/torch.h>

#include "models/attention.h"
#include "models/layers.h"
#include "models/mlp.h"
#include "models/recompute.h"

namespace loom {

// train.activation_checkpointing: none, full (the whole block is recomputed) or selective (its MLP branch,
// which holds most of a block's activations, is recomputed; attention keeps its activations).
enum class ActivationCheckpointing { kNone, kFull, kSelective };
ActivationCheckpointing activation_checkpointing_kind(const std::string& name);

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
  void set_checkpointing(ActivationCheckpointing mode) { checkpointing_ = mode; }

 private:
  torch::Tensor forward_uncheckpointed(const torch::Tensor& x, KVCache* cache);
  torch::Tensor mlp_branch(const torch::Tensor& h);  // dropout(mlp(ln2(h)))

  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::kNone;
  // What recompute_in_backward re-runs; members so that they live as long as the block.
  Recomputable whole_ = [this](const torch::Tensor& x) { return forward_uncheckpointed(x, nullptr); };
  Recomputable mlp_ = [this](const torch::Tensor& h) { return mlp_branch(h); };
  Norm ln1_{nullptr}, ln2_{nullptr};
  Attention attention_{nullptr};
  Mlp mlp_module_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace loom
