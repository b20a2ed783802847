#include "models/gpt.h"

#include <cmath>

#include "core/error.h"

namespace loom {

GptImpl::GptImpl(const ModelConfig& config) : config_(config) {
  LOOM_CHECK(config.vocab_size > 0, "model.vocab_size must be known before the model is built");
  const int64_t C = config.d_model;
  const double out_std = config.init_std / std::sqrt(2.0 * static_cast<double>(config.n_layers));
  token_embedding_ = register_module("token_embedding", torch::nn::Embedding(config.vocab_size, C));
  position_embedding_ = register_module("position_embedding", torch::nn::Embedding(config.max_seq_len, C));
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  BlockOptions block;
  block.attention = {C, config.n_heads, config.dropout, /*causal=*/true, config.init_std, out_std};
  block.mlp = {C, config.ffn_dim(), config.init_std, out_std};
  block.dropout = config.dropout;
  auto blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layers; ++i) {
    blocks_.push_back(Block(block));
    blocks->push_back(blocks_.back());
  }
  final_norm_ = register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
  if (!config.tie_embeddings)
    lm_head_ = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(C, config.vocab_size).bias(false)));

  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(token_embedding_->weight, 0.0, config.init_std);
  torch::nn::init::normal_(position_embedding_->weight, 0.0, config.init_std);
  if (lm_head_) torch::nn::init::normal_(lm_head_->weight, 0.0, config.init_std);
}

torch::Tensor GptImpl::embed(const torch::Tensor& tokens, int64_t first_position) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(first_position + T <= config_.max_seq_len, "sequence of ", first_position + T,
              " positions exceeds model.max_seq_len=", config_.max_seq_len);
  auto positions = torch::arange(first_position, first_position + T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  return dropout_->forward(token_embedding_->forward(tokens) + position_embedding_->forward(positions));
}

torch::Tensor GptImpl::head(const torch::Tensor& hidden) {
  auto h = final_norm_->forward(hidden);
  return lm_head_ ? lm_head_->forward(h) : torch::nn::functional::linear(h, token_embedding_->weight);
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens, std::vector<KVCache>* caches) {
  TORCH_CHECK(caches == nullptr || static_cast<int64_t>(caches->size()) == n_blocks(), "one KV cache per block");
  const int64_t past = caches != nullptr ? (*caches)[0].length() : 0;
  auto x = embed(tokens, past);
  for (int64_t i = 0; i < n_blocks(); ++i) x = blocks_[i]->forward(x, caches != nullptr ? &(*caches)[i] : nullptr);
  return head(x);
}

int64_t count_parameters(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.ffn_dim();
  const int64_t norm = 2 * C;
  const int64_t attention = C * 3 * C + 3 * C + C * C + C;
  const int64_t mlp = C * F + F + F * C + C;
  const int64_t block = 2 * norm + attention + mlp;
  const int64_t embeddings = c.vocab_size * C + c.max_seq_len * C;
  const int64_t head = c.tie_embeddings ? 0 : c.vocab_size * C;
  return embeddings + c.n_layers * block + norm + head;
}

double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double C = static_cast<double>(c.d_model), F = static_cast<double>(c.ffn_dim());
  const double matmul_weights = c.n_layers * (4.0 * C * C + 2.0 * C * F) + static_cast<double>(c.vocab_size) * C;
  return 6.0 * matmul_weights + 12.0 * c.n_layers * C * static_cast<double>(seq_len);
}

}  // namespace loom
