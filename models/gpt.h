// The decoder-only language model: token embeddings (+ learned or sinusoidal positions) -> N pre-norm
// blocks -> final norm -> LM head (tied to the token embedding unless model.tie_embeddings is false).
// GPT-2, LLaMA and the rest of the zoo are this one model with different options (norm, positions,
// activation, biases, kv heads, window): see configs/. Exposed as embed -> blocks -> head so that a
// pipeline stage can later keep only its own blocks.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/attention.h"
#include "models/block.h"
#include "models/estimates.h"
#include "models/layers.h"

namespace loom {

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const ModelConfig& config);

  // tokens: (B, T) int64 -> logits (B, T, V). With caches (one per block), tokens continue the positions
  // the caches have seen.
  torch::Tensor forward(const torch::Tensor& tokens, std::vector<KVCache>* caches = nullptr);

  torch::Tensor embed(const torch::Tensor& tokens, int64_t first_position);  // (B, T) -> (B, T, C)
  torch::Tensor head(const torch::Tensor& hidden);                           // (B, T, C) -> (B, T, V)

  const ModelConfig& config() const { return config_; }
  // Recompute block activations in backward (train.activation_checkpointing); training only.
  void set_activation_checkpointing(ActivationCheckpointing mode);
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  ModelConfig config_;
  PositionKind position_;
  torch::nn::Embedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};  // only for learned positions
  torch::nn::Dropout dropout_{nullptr};
  std::vector<Block> blocks_;
  Norm final_norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // only when untied
};
TORCH_MODULE(Gpt);

// The options of every block of the model a config describes.
BlockOptions block_options(const ModelConfig& config);

}  // namespace loom
