#include "models/block.h"

namespace loom {

BlockImpl::BlockImpl(const BlockOptions& options)
    : post_norm_(options.post_norm),
      tp_rng_(options.attention.tp.rng()),
      shard_rng_(options.attention.tp.sequence_parallel() ? tp_rng_ : nullptr) {
  ln1_ = register_module("ln1", Norm(options.norm));
  attention_ = register_module("attention", Attention(options.attention));
  if (options.cross_attention) {
    AttentionOptions cross = options.attention;
    cross.causal = false;  // every source position is visible to every target position
    cross.window = 0;
    ln_cross_ = register_module("ln_cross", Norm(options.norm));
    cross_attention_ = register_module("cross_attention", Attention(cross));
  }
  ln2_ = register_module("ln2", Norm(options.norm));
  mlp_module_ = register_module("mlp", Mlp(options.mlp));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

template <class F>
torch::Tensor BlockImpl::sublayer(const torch::Tensor& x, Norm& norm, F&& f) {
  if (post_norm_) return norm->forward(x + drop(f(x)));
  return x + drop(f(norm->forward_into_matmul(x)));
}

void BlockImpl::set_checkpointing(ActivationCheckpointing mode) {
  TORCH_CHECK(mode == ActivationCheckpointing::kNone || (!post_norm_ && !cross_attention_),
              "activation checkpointing is only for pre-norm blocks without cross-attention");
  checkpointing_ = mode;
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs) {
  // The recomputed closures see of BlockInputs only the positions (their context), so a block given any of
  // the others runs without checkpointing (only the encoder-decoder's blocks take them, and never checkpoint).
  const bool recompute = is_training() && cache == nullptr && !inputs.padding.defined() && !inputs.memory.defined();
  if (recompute && checkpointing_ == ActivationCheckpointing::kFull)
    return recompute_in_backward(halves_, x, tp_rng_, inputs.positions);
  if (recompute && checkpointing_ == ActivationCheckpointing::kSelective) {
    const auto h = attention_half(x, inputs.positions);
    return h + recompute_in_backward(mlp_branch_, h, tp_rng_);
  }
  return forward_uncheckpointed(x, cache, inputs);
}

torch::Tensor BlockImpl::forward_uncheckpointed(const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs) {
  auto h = sublayer(x, ln1_, [&](const torch::Tensor& in) {
    AttentionInputs self;
    self.key_padding = inputs.padding;
    self.positions = inputs.positions;
    return attention_->forward(in, cache, self);
  });
  if (cross_attention_) {
    TORCH_CHECK(inputs.memory.defined(), "a block with cross-attention needs the encoder output");
    h = sublayer(h, ln_cross_, [&](const torch::Tensor& in) {
      AttentionInputs cross;
      cross.memory = inputs.memory;
      cross.key_padding = inputs.memory_padding;
      cross.memory_keys = inputs.memory_keys;
      return cross_attention_->forward(in, nullptr, cross);
    });
  }
  if (post_norm_) return sublayer(h, ln2_, [&](const torch::Tensor& in) { return mlp_module_->forward(in); });
  return h + mlp_branch(h);
}

torch::Tensor BlockImpl::mlp_branch(const torch::Tensor& h) {
  return drop(mlp_module_->forward(ln2_->forward_into_matmul(h)));
}

torch::Tensor BlockImpl::attention_half(const torch::Tensor& x, const torch::Tensor& positions) {
  AttentionInputs self;
  self.positions = positions;
  return x + drop(attention_->forward(ln1_->forward_into_matmul(x), nullptr, self));
}

torch::Tensor BlockImpl::drop(const torch::Tensor& x) {
  // Whole activations drop alike on every TP rank (the default stream); sequence shards each their own way.
  if (shard_rng_ == nullptr || !is_training()) return dropout_->forward(x);
  TensorParallelRng::Fork own_stream(*shard_rng_, x.device());
  return dropout_->forward(x);
}

}  // namespace loom
