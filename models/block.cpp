#include "models/block.h"

namespace loom {

BlockImpl::BlockImpl(const BlockOptions& options) : post_norm_(options.post_norm) {
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
  mlp_ = register_module("mlp", Mlp(options.mlp));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

template <class F>
torch::Tensor BlockImpl::sublayer(const torch::Tensor& x, Norm& norm, F&& f) {
  if (post_norm_) return norm->forward(x + dropout_->forward(f(x)));
  return x + dropout_->forward(f(norm->forward(x)));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs) {
  auto h = sublayer(x, ln1_, [&](const torch::Tensor& in) {
    return attention_->forward(in, cache, {torch::Tensor(), inputs.padding});
  });
  if (cross_attention_) {
    TORCH_CHECK(inputs.memory.defined(), "a block with cross-attention needs the encoder output");
    h = sublayer(h, ln_cross_, [&](const torch::Tensor& in) {
      return cross_attention_->forward(in, inputs.memory_cache, {inputs.memory, inputs.memory_padding});
    });
  }
  return sublayer(h, ln2_, [&](const torch::Tensor& in) { return mlp_->forward(in); });
}

}  // namespace loom
