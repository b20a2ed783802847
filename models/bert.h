// The encoder-only BERT (Devlin et al. 2019, model.arch: bert): token + learned position + token-type
// embeddings and a LayerNorm over their sum, a stack of bidirectional self-attention blocks (models/block.h:
// post-norm as BERT, or pre-norm with a final norm; padded keys masked), and the masked-LM head: a dense
// C x C layer, the activation (BERT's exact GELU), a norm, then the vocabulary product tied to the token
// embedding (or the untied head) plus an output bias of its own. A classifier (model.num_labels > 0) has
// BertForSequenceClassification's head instead: the first position's ([CLS]) hidden through a C x C dense
// layer and tanh (the pooler), dropout, and a C x labels linear layer. Its parameters are named for loom
// (token_embedding, position_embedding, token_type_embedding, embedding_norm, blocks.N, final_norm,
// mlm_dense, mlm_norm, mlm_bias, or pooler, classifier); models/bert_weights.h maps them to Hugging Face's.
// Built as one pipeline stage of the model like the GPT (models/model_stage.h: the first stage embeds, the
// last holds the head), split over a TP group like the GPT (heads, MLP columns, the vocabulary of the
// embedding, the untied head and the output bias; the dense layer and norms replicated). Its blocks run
// through the stage's BlockRunner, so ZeRO-3 and activation checkpointing apply; ZeRO-3's ends are kept
// gathered over a step (keep_ends: the embedding norm's backward needs its weights).
// Shapes: B batch, T positions, C d_model, V vocabulary (V_r: this TP rank's columns).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/block.h"
#include "models/layers.h"
#include "models/model_stage.h"

namespace loom {

// The MLM head's output bias, split by vocabulary like the logits it is added to (shard_range(V, tp, r)).
class VocabBiasImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  VocabBiasImpl(int64_t vocab_size, const TensorParallelism& tp);
  torch::Tensor forward(const torch::Tensor& logits) { return logits + bias; }  // (..., V_r)
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override { return {{"bias", {0, {vocab_}}}}; }

  torch::Tensor bias;  // (V_r)

 private:
  int64_t vocab_;
};
TORCH_MODULE(VocabBias);

class BertImpl : public StagedModel {
 public:
  // Every rank draws the whole model's initial weights from the RNG in the same order and keeps its stage
  // (and TP shard) of them, so any layout starts from the single-process model.
  explicit BertImpl(const ModelConfig& config, const TensorParallelism& tp = {}, const ModelStage& stage = {});

  // tokens (B, T) int64; padding (B, T) bool, true at padded positions (masked as keys; undefined: none);
  // token_types (B, T) int64 (undefined: all 0) -> logits (B, T, V), or (B, T, V_r) under TP; a classifier
  // (model.num_labels > 0): (B, labels), from each sequence's first position ([CLS]). Whole model.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& padding = {},
                        const torch::Tensor& token_types = {});
  // A pipeline stage: the first embeds tokens, the others take the previous stage's hidden (B, T, C). The
  // last returns the logits at `selected` ((N) int64 indices into the flattened B * T positions: (N, V or
  // V_r); undefined: every position, (B, T, V or V_r)), or a classifier's (B, labels), the others their hidden.
  torch::Tensor forward_stage(const torch::Tensor& tokens, const torch::Tensor& hidden, const torch::Tensor& padding,
                              const torch::Tensor& token_types = {}, const torch::Tensor& selected = {});
  std::vector<int64_t> hidden_shape(int64_t B, int64_t T) const { return {B, T, config_.d_model}; }

  const ModelConfig& config() const { return config_; }
  const ModelStage& stage() const override { return stage_; }
  Communicator* tp_group() const override { return tp_.group(); }
  torch::Tensor stage_tied_embedding() const override { return ends_.stage_tied_embedding(); }

 private:
  torch::Tensor embed(const torch::Tensor& tokens, const torch::Tensor& token_types);  // (B, T) -> (B, T, C)
  torch::Tensor head(const torch::Tensor& h);  // (..., C) -> (..., V or V_r)
  torch::Tensor activate(const torch::Tensor& x) const;
  torch::Tensor classify(const torch::Tensor& h);  // (B, T, C) -> (B, labels)

  ModelConfig config_;
  TensorParallelism tp_;
  ModelStage stage_;
  VocabularyEnds ends_;
  torch::nn::Embedding position_embedding_{nullptr}, token_type_embedding_{nullptr};
  Norm embedding_norm_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  std::vector<Block> blocks_;
  Norm final_norm_{nullptr};  // pre-norm only
  torch::nn::Linear mlm_dense_{nullptr};
  Norm mlm_norm_{nullptr};
  VocabBias mlm_bias_{nullptr};
  torch::nn::Linear pooler_{nullptr}, classifier_{nullptr};  // a classifier's head instead of the MLM head
};
TORCH_MODULE(Bert);

// BERT's token-type vocabulary (segments A and B).
constexpr int64_t kBertTokenTypes = 2;

}  // namespace loom
