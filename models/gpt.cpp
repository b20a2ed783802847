#include "models/gpt.h"

#include <cmath>

#include "core/error.h"
#include "models/document_mask.h"

namespace loom {

BlockOptions block_options(const ModelConfig& c, const TensorParallelism& tp, const ContextParallelism& cp) {
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  BlockOptions block;
  auto& a = block.attention;
  a.d_model = c.d_model;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.kv_heads();
  a.head_dim = c.head_dim();
  a.qk_norm = c.qk_norm;
  a.qk_norm_eps = c.norm_eps;
  a.bias = c.bias;
  a.scaled = c.scale_attention;
  a.window = c.attention_window;
  a.position = c.position;
  a.rope.theta = c.rope_theta;
  a.rope.scaling = c.rope_scaling;
  a.rope.factor = c.rope_scaling_factor;
  a.dropout = c.dropout;
  a.init_std = c.init_std;
  a.out_init_std = out_std;
  a.tp = tp;
  a.cp = cp;
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

GptImpl::GptImpl(const ModelConfig& config, const TensorParallelism& tp, const ModelStage& stage,
                 const ContextParallelism& cp)
    : config_(config), tp_(tp), stage_(stage), cp_(cp), position_(config.position) {
  LOOM_CHECK(config.vocab_size > 0, "model.vocab_size must be known before the model is built");
  StageBuilder build(*this, stage_, config.n_layers, "model.n_layers");
  const BlockOptions block = block_options(config, tp, cp);
  // The whole model's parts in order, each drawing its initial weights; this stage keeps its own.
  ends_.build_embedding(build, config, tp);
  torch::nn::Embedding position_embedding{nullptr};
  if (position_ == PositionKind::kLearned) {
    position_embedding = torch::nn::Embedding(config.max_seq_len, config.d_model);
    position_embedding_ = build.keep("position_embedding", position_embedding, stage_.first);
  }
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  BlockOptions moe_block = block;  // the MoE layers' (model.moe): the MLP a Mixture of Experts
  moe_block.moe = true;
  moe_block.moe_options = moe_options(config);
  moe_block.moe_options.out_init_std = block.mlp.out_init_std;
  moe_block.moe_options.token_group = cp.split_group();  // the routing statistics span the whole sequences
  moe_block.moe_options.sequence_group = tp.sequence_parallel() ? tp.group() : nullptr;
  blocks_ = build.blocks_by<Block>("blocks", 0, config.n_layers, [&](int64_t i) {
    return config.moe.layer_is_moe(i) ? moe_block : block;
  });
  runner().set_blocks(blocks_);
  if (stage_.last) final_norm_ = register_module("final_norm", Norm(block.norm));
  ends_.build_head(build, config, tp);

  torch::NoGradGuard no_grad;
  ends_.init_embedding(config.init_std);
  if (position_embedding) torch::nn::init::normal_(position_embedding->weight, 0.0, config.init_std);
}

torch::Tensor GptImpl::embed(const torch::Tensor& tokens, int64_t first_position, const torch::Tensor& positions,
                             const torch::Tensor& row_first) {
  const int64_t T = tokens.size(1);
  const bool split = cp_.split_group() != nullptr;  // context parallelism: T of T * cp positions
  TORCH_CHECK(!split || first_position == 0, "a context-parallel model does not generate: load it whole");
  TORCH_CHECK(first_position + T * cp_.size() <= config_.max_seq_len, "sequence of ", first_position + T * cp_.size(),
              " positions exceeds model.max_seq_len=", config_.max_seq_len);
  if (positions.defined()) check_document_positions(positions, tokens.size(0), T);  // each below T: fits too
  // Each token's position: in its document (packed), its global one (context parallelism), or a range.
  const torch::Tensor at =
      positions.defined()   ? positions.to(tokens.device())
      : split               ? cp_.positions(T, tokens.device()).unsqueeze(0)
      : row_first.defined() ? (row_first.unsqueeze(1) + torch::arange(T, row_first.options())).to(tokens.device())
                            : torch::Tensor();
  auto x = ends_.embed(tokens);  // (B, T, C)
  if (position_ == PositionKind::kLearned) {
    x = x + position_embedding_->forward(
                at.defined() ? at : torch::arange(first_position, first_position + T, tokens.options().dtype(torch::kLong)));
  } else if (position_ == PositionKind::kSinusoidal) {
    x = x + (at.defined() ? sinusoidal_positions_at(at, config_.d_model, x.options())
                          : sinusoidal_positions(first_position, T, config_.d_model, x.options()));
  }
  return embedding_dropout(x, dropout_, tp_);
}

torch::Tensor GptImpl::head(const torch::Tensor& hidden) {
  return runner().head(hidden, [&](const torch::Tensor& h) { return ends_.logits(final_norm_->forward(h)); });
}

torch::Tensor GptImpl::forward_stage(const torch::Tensor& tokens, const torch::Tensor& hidden,
                                     const torch::Tensor& positions) {
  // ZeRO-3's ends unit: gathered for the embeddings and again for the head, freed over the blocks.
  auto x = stage_.first ? runner().embeddings([&] { return embed(tokens, 0, positions); }) : hidden;
  BlockInputs inputs;
  inputs.positions = positions;
  x = run_blocks(x, nullptr, inputs);
  return stage_.last ? head(x) : x;
}

torch::Tensor GptImpl::run_blocks(torch::Tensor x, KVCaches* caches, const BlockInputs& inputs) {
  for (size_t i = 0; i < blocks_.size(); ++i)
    x = runner().block(i, x, caches != nullptr ? &(*caches)[i] : nullptr, inputs);
  return x;
}

std::vector<int64_t> GptImpl::hidden_shape(int64_t B, int64_t T) const {
  return {B, tp_.sequence_parallel() ? T / tp_.size() : T, config_.d_model};
}

torch::Tensor GptImpl::trunk(const torch::Tensor& tokens, KVCaches* caches,
                             const torch::Tensor& positions) {
  TORCH_CHECK(stage_.whole(), "forward() runs the whole model; a pipeline stage runs forward_stage()");
  TORCH_CHECK(caches == nullptr || static_cast<int64_t>(caches->size()) == n_blocks(), "one KV cache per block");
  TORCH_CHECK(caches == nullptr || !tp_.sequence_parallel(), "a sequence-parallel model does not generate: load it whole");
  // A prompt is one document: generation never packs.
  TORCH_CHECK(caches == nullptr || !positions.defined(), "packed documents' positions take no KV cache");
  TORCH_CHECK(caches == nullptr || !runner().gathers(), "a ZeRO-3 model does not generate: load it whole");
  const int64_t past = caches != nullptr ? caches->seen() : 0;
  // A ragged batch (a paged cache's rows at different positions): each row from its own.
  const auto row_first = caches != nullptr ? caches->seen_rows() : torch::Tensor();
  auto x = runner().embeddings([&] { return embed(tokens, past, positions, row_first); });
  BlockInputs inputs;
  inputs.positions = positions;
  return run_blocks(x, caches, inputs);
}

torch::Tensor GptImpl::final_hidden(const torch::Tensor& tokens, const torch::Tensor& positions) {
  TORCH_CHECK(tp_.size() <= 1, "final_hidden() is for a model that is not tensor-parallel");
  // The output layer's product is the caller's (head_weight(), the ends still gathered), with its gradients
  // computed in forward (optim/linear_cross_entropy.h): the head's backward here is the final norm's.
  return runner().head(trunk(tokens, nullptr, positions),
                       [&](const torch::Tensor& h) { return final_norm_->forward(h); });
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens, KVCaches* caches,
                               const torch::Tensor& positions) {
  return head(trunk(tokens, caches, positions));
}

}  // namespace loom
