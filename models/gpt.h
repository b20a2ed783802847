// The decoder-only language model: token embeddings (+ learned or sinusoidal positions) -> N pre-norm
// blocks -> final norm -> LM head (tied to the token embedding unless model.tie_embeddings is false).
// GPT-2, LLaMA and the rest of the zoo are this one model with different options (norm, positions,
// activation, biases, kv heads, window): see configs/. Exposed as embed -> blocks -> head so that a
// pipeline stage keeps only its own part (models/model_stage.h): blocks keep their global names ("blocks.5"
// on the second stage too), so a checkpoint's parameter names are the same under every layout. The first
// stage holds the embeddings, the last the final norm and head; with tied embeddings the last stage holds its
// own copy of the token embedding for the head, kept identical to the first's by summing their gradients.
// Tensor parallelism: built with a TP group, the blocks split their heads and FFN columns, the token
// embedding (and the untied LM head) split the vocabulary, and forward/head return this rank's vocabulary
// columns of the logits (for vocab-parallel cross-entropy). No group, or a group of one: the plain model.
// With sequence parallelism the blocks pass (B, T / tp, C) between them: embed's output is this rank's
// positions and head gathers them again before the vocabulary-parallel logits (training and evaluation;
// generation loads the model whole).
// Context parallelism: built with a CP group, the model is handed this rank's part of each sequence
// (parallel/context_parallel_layout.h: 2 of its 2 cp chunks); positions are global (learned, sinusoidal,
// RoPE, ALiBi) and attention runs round the group (ring attention); everything else is per token.
// ZeRO-3 and activation checkpointing are applied from outside (StagedModel::parallelize): embeddings, blocks
// and head run through the stage's BlockRunner (models/block_runner.h), the ends freed over the blocks.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/attention.h"
#include "models/block.h"
#include "models/estimates.h"
#include "models/layers.h"
#include "models/model_stage.h"

namespace loom {

class GptImpl : public StagedModel {
 public:
  // Every rank draws the whole model's initial weights from the RNG in the same order and keeps its stage
  // (and TP shard) of them, so any layout starts from the single-process model.
  explicit GptImpl(const ModelConfig& config, const TensorParallelism& tp = {}, const ModelStage& stage = {},
                   const ContextParallelism& cp = {});

  // tokens: (B, T) int64 -> logits (B, T, V), or (B, T, V_r) of this rank's columns under TP. With caches (one
  // per block: new_caches(), models/kv_cache.h), tokens continue the positions the caches have seen. The whole model only. positions (packed documents, data.document_mask; no caches):
  // (B, T) int64, each token's position in its document, which it attends to alone (models/document_mask.h);
  // undefined: each row one document.
  torch::Tensor forward(const torch::Tensor& tokens, KVCaches* caches = nullptr,
                        const torch::Tensor& positions = {});
  // A pipeline stage's forward: the first stage embeds tokens (B, T), the others take the previous stage's
  // hidden of hidden_shape(); the last returns logits as forward() does, the others their hidden. Every
  // stage takes the batch's positions (packed documents: each stage's attention masks by them).
  torch::Tensor forward_stage(const torch::Tensor& tokens, const torch::Tensor& hidden,
                              const torch::Tensor& positions = {});
  // What passes between blocks (and pipeline stages) for B sequences of T tokens: (B, T, C), or with
  // sequence parallelism this rank's positions (B, T / tp, C), as Megatron sends them between stages.
  std::vector<int64_t> hidden_shape(int64_t B, int64_t T) const;

  // (B, T) -> (B, T or T / tp, C); positions [first_position, first_position + T), or the given (B, T) ones;
  // under context parallelism this rank's global positions (first_position 0); row_first (B) int64: each row's
  // from its own first position (a ragged batch of cached sequences, first_position their maximum)
  torch::Tensor embed(const torch::Tensor& tokens, int64_t first_position, const torch::Tensor& positions = {},
                      const torch::Tensor& row_first = {});
  torch::Tensor head(const torch::Tensor& hidden);  // (B, T or T / tp, C) -> (B, T, V or V_r)
  // What the LM head multiplies, for a loss that fuses the head (optim/linear_cross_entropy.h):
  // forward(tokens) == final_hidden(tokens) @ head_weight()^T. tokens: (B, T) -> (B, T, C). Under ZeRO-3
  // head_weight() holds its values until the backward has passed final_hidden: the caller's product must
  // not need them in backward (linear_cross_entropy computes its gradients in forward).
  torch::Tensor final_hidden(const torch::Tensor& tokens, const torch::Tensor& positions = {});
  const torch::Tensor& head_weight() const { return ends_.head_weight(); }  // (V or V_r, C): the embedding's when tied

  const ModelConfig& config() const { return config_; }
  Communicator* tp_group() const override { return tp_.group(); }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  // One contiguous KV cache per block, keeping what the attention window needs (models/kv_cache.h).
  KVCaches new_caches() const { return contiguous_kv_caches(n_blocks(), config_.attention_window); }
  const ModelStage& stage() const override { return stage_; }
  // How its sequences are split (context parallelism): the task hands it this rank's part of each batch.
  const ContextParallelism& context_parallelism() const { return cp_; }
  // The token embedding, as StagedModel says.
  torch::Tensor stage_tied_embedding() const override { return ends_.stage_tied_embedding(); }

 private:
  // embed -> blocks: (B, T, C)
  torch::Tensor trunk(const torch::Tensor& tokens, KVCaches* caches, const torch::Tensor& positions);
  // x through this stage's blocks, run by the runner (caches: one per block, or null)
  torch::Tensor run_blocks(torch::Tensor x, KVCaches* caches, const BlockInputs& inputs);

  ModelConfig config_;
  TensorParallelism tp_;
  ModelStage stage_;
  ContextParallelism cp_;
  PositionKind position_;
  VocabularyEnds ends_;  // the token embedding and the head
  torch::nn::Embedding position_embedding_{nullptr};  // only for learned positions
  torch::nn::Dropout dropout_{nullptr};
  std::vector<Block> blocks_;  // this stage's, blocks_[i] is global block stage_.first_block + i
  Norm final_norm_{nullptr};
};
TORCH_MODULE(Gpt);

// The options of every block of the model a config describes.
BlockOptions block_options(const ModelConfig& config, const TensorParallelism& tp = {},
                           const ContextParallelism& cp = {});

// The embedding's dropout, x: (B, T, C) -> (B, T, C). With tp.sequence_parallel() x is first cut to this
// rank's positions, (B, T / tp, C), whose masks draw from tp.rng().
torch::Tensor embedding_dropout(const torch::Tensor& x, torch::nn::Dropout& dropout, const TensorParallelism& tp);

}  // namespace loom
