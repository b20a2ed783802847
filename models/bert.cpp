#include "models/bert.h"

#include "core/error.h"
#include "models/gelu.h"
#include "models/gpt.h"  // block_options, embedding_dropout

namespace loom {

VocabBiasImpl::VocabBiasImpl(int64_t vocab_size, const TensorParallelism& tp) : vocab_(vocab_size) {
  const ShardRange range = shard_range(vocab_size, tp.size(), tp.rank());
  bias = register_parameter("bias", torch::zeros({range.length}));
}

BertImpl::BertImpl(const ModelConfig& config, const TensorParallelism& tp, const ModelStage& stage)
    : config_(config), tp_(tp), stage_(stage) {
  LOOM_CHECK(config.vocab_size > 0, "model.vocab_size must be known before the model is built");
  LOOM_CHECK(!tp.sequence_parallel(), "model.arch=bert is not sequence-parallel");
  StageBuilder build(*this, stage_, config.n_layers, "model.n_layers");
  BlockOptions block = block_options(config, tp);
  block.post_norm = config.norm_position == NormPosition::kPost;
  block.attention.causal = false;
  const int64_t C = config.d_model;
  // The whole model's parts in order, each drawing its initial weights; this stage keeps its own.
  ends_.build_embedding(build, config, tp);
  torch::nn::Embedding positions(config.max_seq_len, C), types(kBertTokenTypes, C);
  position_embedding_ = build.keep("position_embedding", positions, stage_.first);
  token_type_embedding_ = build.keep("token_type_embedding", types, stage_.first);
  embedding_norm_ = build.keep("embedding_norm", Norm(block.norm), stage_.first);
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  blocks_ = build.blocks<Block>("blocks", 0, config.n_layers, block);
  runner().set_blocks(blocks_);
  if (!block.post_norm && stage_.last) final_norm_ = register_module("final_norm", Norm(block.norm));
  if (config.num_labels > 0) {
    pooler_ = build.keep("pooler", make_linear(C, C, /*bias=*/true, config.init_std), stage_.last);
    classifier_ = build.keep("classifier", make_linear(C, config.num_labels, /*bias=*/true, config.init_std),
                             stage_.last);
  } else {
    mlm_dense_ = build.keep("mlm_dense", make_linear(C, C, /*bias=*/true, config.init_std), stage_.last);
    mlm_norm_ = build.keep("mlm_norm", Norm(block.norm), stage_.last);
    mlm_bias_ = build.keep("mlm_bias", VocabBias(config.vocab_size, tp), stage_.last);
    ends_.build_head(build, config, tp);
  }

  torch::NoGradGuard no_grad;
  ends_.init_embedding(config.init_std);
  for (auto* table : {&positions, &types}) torch::nn::init::normal_((*table)->weight, 0.0, config.init_std);
}

torch::Tensor BertImpl::activate(const torch::Tensor& x) const {
  return config_.activation == Activation::kGeluErf ? torch::gelu(x) : gelu_tanh(x);
}

torch::Tensor BertImpl::embed(const torch::Tensor& tokens, const torch::Tensor& token_types) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= config_.max_seq_len, "sequence of ", T, " positions exceeds model.max_seq_len=", config_.max_seq_len);
  auto x = ends_.embed(tokens) + position_embedding_->forward(torch::arange(T, tokens.options().dtype(torch::kLong)));
  x = x + (token_types.defined() ? token_type_embedding_->forward(token_types.to(tokens.device()))
                                 : token_type_embedding_->weight[0]);
  return embedding_dropout(embedding_norm_->forward(x), dropout_, tp_);
}

torch::Tensor BertImpl::head(const torch::Tensor& h) {
  const auto normed = final_norm_ ? final_norm_->forward(h) : h;
  return mlm_bias_->forward(ends_.logits(mlm_norm_->forward(activate(mlm_dense_->forward(normed)))));
}

torch::Tensor BertImpl::classify(const torch::Tensor& h) {
  const auto first = (final_norm_ ? final_norm_->forward(h) : h).select(1, 0);  // (B, C): [CLS]
  return classifier_->forward(dropout_->forward(torch::tanh(pooler_->forward(first))));
}

torch::Tensor BertImpl::forward_stage(const torch::Tensor& tokens, const torch::Tensor& hidden,
                                      const torch::Tensor& padding, const torch::Tensor& token_types,
                                      const torch::Tensor& selected) {
  // ZeRO-3's ends unit, kept gathered over the step: the embedding norm's backward needs its weights.
  runner().keep_ends();
  auto x = stage_.first ? embed(tokens, token_types) : hidden;
  BlockInputs inputs;
  inputs.padding = padding;
  for (size_t i = 0; i < blocks_.size(); ++i) x = runner().block(i, x, nullptr, inputs);
  if (!stage_.last) return x;
  if (classifier_) return classify(x);
  return head(selected.defined() ? x.flatten(0, 1).index_select(0, selected) : x);
}

torch::Tensor BertImpl::forward(const torch::Tensor& tokens, const torch::Tensor& padding,
                                const torch::Tensor& token_types) {
  TORCH_CHECK(stage_.whole(), "forward() runs the whole model; a pipeline stage runs forward_stage()");
  return forward_stage(tokens, {}, padding.defined() ? padding.to(tokens.device()) : padding, token_types);
}

}  // namespace loom
