// Decoder-only GPT: token + learned position embeddings -> N pre-LN blocks -> final LayerNorm -> LM head
// (tied to the token embedding unless model.tie_embeddings is false). Exposed as embed -> blocks -> head
// so that a pipeline stage can later keep only its own blocks.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/attention.h"
#include "models/block.h"

namespace loom {

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const ModelConfig& config);

  // tokens: (B, T) int64 -> logits (B, T, V). With caches (one per block), tokens continue the cached
  // positions.
  torch::Tensor forward(const torch::Tensor& tokens, std::vector<KVCache>* caches = nullptr);

  torch::Tensor embed(const torch::Tensor& tokens, int64_t first_position);  // (B, T) -> (B, T, C)
  torch::Tensor head(const torch::Tensor& hidden);                           // (B, T, C) -> (B, T, V)

  const ModelConfig& config() const { return config_; }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  ModelConfig config_;
  torch::nn::Embedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  std::vector<Block> blocks_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // only when untied
};
TORCH_MODULE(Gpt);

// Exact parameter count of the model a config builds, without building it.
int64_t count_parameters(const ModelConfig& config);

// Training FLOPs per token (forward + backward) at sequence length seq_len: 6 x (every weight a token
// multiplies through, the LM head included) + 12 x n_layers x d_model x seq_len for attention scores
// and weighted values (no discount for the causal mask).
double training_flops_per_token(const ModelConfig& config, int64_t seq_len);

}  // namespace loom
