#include "models/block.h"

namespace loom {

BlockImpl::BlockImpl(const BlockOptions& options) {
  ln1_ = register_module("ln1", Norm(options.norm));
  attention_ = register_module("attention", Attention(options.attention));
  ln2_ = register_module("ln2", Norm(options.norm));
  mlp_ = register_module("mlp", Mlp(options.mlp));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, KVCache* cache) {
  auto h = x + dropout_->forward(attention_->forward(ln1_->forward(x), cache));
  return h + dropout_->forward(mlp_->forward(ln2_->forward(h)));
}

}  // namespace loom
