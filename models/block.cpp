#include "models/block.h"

namespace loom {
namespace {

// BlockInputs as the side tensors of a recomputed block (models/recompute.h), and back. The encoder output
// (memory) and a position bias (T5's, from its table) need gradient.
RecomputeSide side_of(const BlockInputs& inputs) {
  return {inputs.positions, inputs.padding, inputs.memory, inputs.memory_padding, inputs.position_bias};
}
BlockInputs inputs_of(const RecomputeSide& side) {
  BlockInputs inputs;
  inputs.positions = side[0];
  inputs.padding = side[1];
  inputs.memory = side[2];
  inputs.memory_padding = side[3];
  inputs.position_bias = side[4];
  return inputs;
}

}  // namespace

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
  if (options.moe)
    moe_module_ = register_module("mlp", Moe(options.moe_options));
  else
    mlp_module_ = register_module("mlp", Mlp(options.mlp));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));

  sublayers_.push_back([this](const torch::Tensor& x, const RecomputeSide& side) {
    return self_attention_half(x, nullptr, inputs_of(side));
  });
  if (cross_attention_) {
    sublayers_.push_back([this](const torch::Tensor& h, const RecomputeSide& side) {
      return cross_attention_half(h, inputs_of(side));
    });
  }
  mlp_sublayer_.push_back([this](const torch::Tensor& h, const RecomputeSide&) { return mlp_half(h); });
  sublayers_.push_back(mlp_sublayer_.front());
}

template <class F>
torch::Tensor BlockImpl::sublayer(const torch::Tensor& x, Norm& norm, F&& f) {
  if (post_norm_) return norm->forward(x + drop(f(x)));
  return x + drop(f(norm->forward_into_matmul(x)));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs,
                                 ActivationCheckpointing checkpointing) {
  const bool recompute = is_training() && cache == nullptr && inputs.memory_keys == nullptr;
  if (recompute && checkpointing == ActivationCheckpointing::kFull)
    return recompute_in_backward(sublayers_, x, tp_rng_, side_of(inputs));
  auto h = self_attention_half(x, cache, inputs);
  if (cross_attention_) h = cross_attention_half(h, inputs);
  if (recompute && checkpointing == ActivationCheckpointing::kSelective)
    return recompute_in_backward(mlp_sublayer_, h, tp_rng_);
  return mlp_half(h);
}

torch::Tensor BlockImpl::self_attention_half(const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs) {
  return sublayer(x, ln1_, [&](const torch::Tensor& in) {
    AttentionInputs self;
    self.key_padding = inputs.padding;
    self.positions = inputs.positions;
    self.position_bias = inputs.position_bias;
    return attention_->forward(in, cache, self);
  });
}

torch::Tensor BlockImpl::cross_attention_half(const torch::Tensor& h, const BlockInputs& inputs) {
  TORCH_CHECK(inputs.memory.defined(), "a block with cross-attention needs the encoder output");
  return sublayer(h, ln_cross_, [&](const torch::Tensor& in) {
    AttentionInputs cross;
    cross.memory = inputs.memory;
    cross.key_padding = inputs.memory_padding;
    cross.memory_keys = inputs.memory_keys;
    return cross_attention_->forward(in, nullptr, cross);
  });
}

torch::Tensor BlockImpl::mlp_half(const torch::Tensor& h) {
  return sublayer(h, ln2_, [&](const torch::Tensor& in) {
    return moe_module_ ? moe_module_->forward(in) : mlp_module_->forward(in);
  });
}

torch::Tensor BlockImpl::drop(const torch::Tensor& x) {
  // Whole activations drop alike on every TP rank (the default stream); sequence shards each their own way.
  if (shard_rng_ == nullptr || !is_training()) return dropout_->forward(x);
  TensorParallelRng::Fork own_stream(*shard_rng_, x.device());
  return dropout_->forward(x);
}

}  // namespace loom
