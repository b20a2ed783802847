#include "models/gpt.h"

#include <cmath>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace loom {

BlockOptions block_options(const ModelConfig& c, const TensorParallelism& tp) {
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  BlockOptions block;
  auto& a = block.attention;
  a.d_model = c.d_model;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.kv_heads();
  a.head_dim = c.head_dim();
  a.bias = c.bias;
  a.window = c.attention_window;
  a.position = c.position;
  a.rope.theta = c.rope_theta;
  a.rope.scaling = c.rope_scaling;
  a.rope.factor = c.rope_scaling_factor;
  a.dropout = c.dropout;
  a.init_std = c.init_std;
  a.out_init_std = out_std;
  a.tp = tp;
  auto& mlp = block.mlp;
  mlp.d_model = c.d_model;
  mlp.d_ff = c.ffn_dim();
  mlp.activation = c.activation;
  mlp.bias = c.bias;
  mlp.init_std = c.init_std;
  mlp.out_init_std = out_std;
  mlp.tp = tp;
  auto& norm = block.norm;
  norm.dim = c.d_model;
  norm.kind = c.norm;
  norm.eps = c.norm_eps;
  norm.sequence_group = tp.sequence_parallel() ? tp.group() : nullptr;
  block.dropout = c.dropout;
  return block;
}

torch::Tensor embedding_dropout(const torch::Tensor& x, torch::nn::Dropout& dropout, const TensorParallelism& tp) {
  if (!tp.sequence_parallel()) return dropout->forward(x);
  // This rank's positions from here to the head; their dropout masks are the rank's own.
  const auto shard = scatter_to_sequence(x, *tp.group());  // (B, T / tp, C)
  if (!dropout->is_training() || tp.rng() == nullptr) return dropout->forward(shard);
  TensorParallelRng::Fork own_stream(*tp.rng(), shard.device());
  return dropout->forward(shard);
}

ModelStage model_stage(const ModelConfig& model, const ParallelConfig& parallel, int64_t stage) {
  const auto layers = stage_layers(model.pipeline_layers(), parallel.pp, parallel.pp_layers);
  const BlockRange blocks = stage_blocks(layers, stage);
  return {blocks.first, blocks.end, stage == 0, stage == parallel.pp - 1};
}

GptImpl::GptImpl(const ModelConfig& config, const TensorParallelism& tp, const ModelStage& stage)
    : config_(config), tp_(tp), stage_(stage), position_(config.position) {
  LOOM_CHECK(config.vocab_size > 0, "model.vocab_size must be known before the model is built");
  if (stage_.end_block < 0) stage_.end_block = config.n_layers;
  LOOM_CHECK(0 <= stage_.first_block && stage_.first_block < stage_.end_block && stage_.end_block <= config.n_layers,
             "pipeline stage blocks [", stage_.first_block, ", ", stage_.end_block, ") outside model.n_layers=",
             config.n_layers);
  const int64_t C = config.d_model;
  const BlockOptions block = block_options(config, tp);
  // Every part is built (drawing its initial weights) whether the stage keeps it or not, so that the RNG
  // draws are those of the whole model; a part not kept is freed at once.
  const bool holds_embedding = stage_.first || (stage_.last && config.tie_embeddings);
  VocabParallelEmbeddingOptions embedding_options;
  embedding_options.vocab_size = config.vocab_size;
  embedding_options.dim = C;
  embedding_options.tp = tp;
  auto token_embedding = VocabParallelEmbedding(embedding_options);
  if (holds_embedding) token_embedding_ = register_module("token_embedding", token_embedding);
  torch::nn::Embedding position_embedding{nullptr};
  if (position_ == PositionKind::kLearned) {
    position_embedding = torch::nn::Embedding(config.max_seq_len, C);
    if (stage_.first) position_embedding_ = register_module("position_embedding", position_embedding);
  }
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  // A plain module holding the blocks by their global index (a ModuleList would number them from 0).
  auto blocks = register_module("blocks", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < config.n_layers; ++i) {
    Block b(block);
    if (i < stage_.first_block || i >= stage_.end_block) continue;
    blocks_.push_back(b);
    blocks->register_module(std::to_string(i), b);
  }
  if (stage_.last) final_norm_ = register_module("final_norm", Norm(block.norm));
  if (!config.tie_embeddings) {
    ParallelLinearOptions head_options;
    head_options.in = C;
    head_options.out = config.vocab_size;
    head_options.bias = false;
    head_options.init_std = config.init_std;
    head_options.tp = tp;
    auto lm_head = ColumnParallelLinear(head_options);
    if (stage_.last) lm_head_ = register_module("lm_head", lm_head);
  }

  torch::NoGradGuard no_grad;
  token_embedding->reset_normal(config.init_std);
  if (position_embedding) torch::nn::init::normal_(position_embedding->weight, 0.0, config.init_std);
}

torch::Tensor GptImpl::stage_tied_embedding() const {
  const bool split = !(stage_.first && stage_.last);
  return split && config_.tie_embeddings && token_embedding_ ? token_embedding_->weight : torch::Tensor();
}

void GptImpl::set_activation_checkpointing(ActivationCheckpointing mode) {
  for (auto& block : blocks_) block->set_checkpointing(mode);
}

torch::Tensor GptImpl::embed(const torch::Tensor& tokens, int64_t first_position) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(first_position + T <= config_.max_seq_len, "sequence of ", first_position + T,
              " positions exceeds model.max_seq_len=", config_.max_seq_len);
  auto x = token_embedding_->forward(tokens);  // (B, T, C)
  if (position_ == PositionKind::kLearned) {
    auto positions = torch::arange(first_position, first_position + T, tokens.options().dtype(torch::kLong));
    x = x + position_embedding_->forward(positions);
  } else if (position_ == PositionKind::kSinusoidal) {
    x = x + sinusoidal_positions(first_position, T, config_.d_model, x.options());
  }
  return embedding_dropout(x, dropout_, tp_);
}

torch::Tensor GptImpl::head(const torch::Tensor& hidden) {
  auto h = final_norm_->forward(hidden);
  return lm_head_ ? lm_head_->forward(h) : token_embedding_->logits(h);
}

const torch::Tensor& GptImpl::head_weight() const { return lm_head_ ? lm_head_->weight : token_embedding_->weight; }

torch::Tensor GptImpl::forward_stage(const torch::Tensor& tokens, const torch::Tensor& hidden) {
  auto x = stage_.first ? embed(tokens, 0) : hidden;  // hidden_shape(B, T)
  for (auto& block : blocks_) x = block->forward(x);
  return stage_.last ? head(x) : x;
}

std::vector<int64_t> GptImpl::hidden_shape(int64_t B, int64_t T) const {
  return {B, tp_.sequence_parallel() ? T / tp_.size() : T, config_.d_model};
}

torch::Tensor GptImpl::trunk(const torch::Tensor& tokens, std::vector<KVCache>* caches) {
  TORCH_CHECK(stage_.first && stage_.last, "forward() runs the whole model; a pipeline stage runs forward_stage()");
  TORCH_CHECK(caches == nullptr || static_cast<int64_t>(caches->size()) == n_blocks(), "one KV cache per block");
  TORCH_CHECK(caches == nullptr || !tp_.sequence_parallel(), "a sequence-parallel model does not generate: load it whole");
  const int64_t past = caches != nullptr ? (*caches)[0].seen : 0;
  auto x = embed(tokens, past);
  for (int64_t i = 0; i < n_blocks(); ++i) x = blocks_[i]->forward(x, caches != nullptr ? &(*caches)[i] : nullptr);
  return x;
}

torch::Tensor GptImpl::final_hidden(const torch::Tensor& tokens) {
  TORCH_CHECK(tp_.size() <= 1, "final_hidden() is for a model that is not tensor-parallel");
  return final_norm_->forward(trunk(tokens, nullptr));
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens, std::vector<KVCache>* caches) {
  return head(trunk(tokens, caches));
}

}  // namespace loom
