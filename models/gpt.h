// The decoder-only language model: token embeddings (+ learned or sinusoidal positions) -> N pre-norm
// blocks -> final norm -> LM head (tied to the token embedding unless model.tie_embeddings is false).
// GPT-2, LLaMA and the rest of the zoo are this one model with different options (norm, positions,
// activation, biases, kv heads, window): see configs/. Exposed as embed -> blocks -> head so that a
// pipeline stage can later keep only its own blocks.
// Tensor parallelism: built with a TP group, the blocks split their heads and FFN columns, the token
// embedding (and the untied LM head) split the vocabulary, and forward/head return this rank's vocabulary
// columns of the logits (for vocab-parallel cross-entropy). No group, or a group of one: the plain model.
// With sequence parallelism the blocks pass (B, T / tp, C) between them: embed's output is this rank's
// positions and head gathers them again before the vocabulary-parallel logits (training and evaluation;
// generation loads the model whole).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/attention.h"
#include "models/block.h"
#include "models/estimates.h"
#include "models/layers.h"
#include "models/parallel_linear.h"
#include "models/vocab_parallel_embedding.h"

namespace loom {

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const ModelConfig& config, const TensorParallelism& tp = {});

  // tokens: (B, T) int64 -> logits (B, T, V), or (B, T, V_r) of this rank's columns under TP. With caches (one per block), tokens continue the positions
  // the caches have seen.
  torch::Tensor forward(const torch::Tensor& tokens, std::vector<KVCache>* caches = nullptr);

  torch::Tensor embed(const torch::Tensor& tokens, int64_t first_position);  // (B, T) -> (B, T or T / tp, C)
  torch::Tensor head(const torch::Tensor& hidden);  // (B, T or T / tp, C) -> (B, T, V or V_r)
  // What the LM head multiplies, for a loss that fuses the head (optim/linear_cross_entropy.h):
  // forward(tokens) == final_hidden(tokens) @ head_weight()^T. tokens: (B, T) -> (B, T, C).
  torch::Tensor final_hidden(const torch::Tensor& tokens);
  const torch::Tensor& head_weight() const;  // (V or V_r, C): the token embedding when tied

  const ModelConfig& config() const { return config_; }
  // Recompute block activations in backward (train.activation_checkpointing); training only.
  void set_activation_checkpointing(ActivationCheckpointing mode);
  // The tensor-parallel group the model was built with (null: none); the loss over its logits needs it.
  Communicator* tp_group() const { return tp_.group; }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  torch::Tensor trunk(const torch::Tensor& tokens, std::vector<KVCache>* caches);  // embed -> blocks: (B, T, C)

  ModelConfig config_;
  TensorParallelism tp_;
  PositionKind position_;
  VocabParallelEmbedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};  // only for learned positions
  torch::nn::Dropout dropout_{nullptr};
  std::vector<Block> blocks_;
  Norm final_norm_{nullptr};
  ColumnParallelLinear lm_head_{nullptr};  // only when untied
};
TORCH_MODULE(Gpt);

// The options of every block of the model a config describes.
BlockOptions block_options(const ModelConfig& config, const TensorParallelism& tp = {});

}  // namespace loom
