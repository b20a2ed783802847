#include "models/block.h"

namespace loom {

ActivationCheckpointing activation_checkpointing_kind(const std::string& name) {
  return choice<ActivationCheckpointing>(name,
                                         {{"none", ActivationCheckpointing::kNone},
                                          {"full", ActivationCheckpointing::kFull},
                                          {"selective", ActivationCheckpointing::kSelective}},
                                         "activation checkpointing");
}

BlockImpl::BlockImpl(const BlockOptions& options) {
  ln1_ = register_module("ln1", Norm(options.norm));
  attention_ = register_module("attention", Attention(options.attention));
  ln2_ = register_module("ln2", Norm(options.norm));
  mlp_module_ = register_module("mlp", Mlp(options.mlp));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, KVCache* cache) {
  const bool recompute = is_training() && cache == nullptr;
  if (recompute && checkpointing_ == ActivationCheckpointing::kFull) return recompute_in_backward(whole_, x);
  if (recompute && checkpointing_ == ActivationCheckpointing::kSelective) {
    auto h = x + dropout_->forward(attention_->forward(ln1_->forward(x), cache));
    return h + recompute_in_backward(mlp_, h);
  }
  return forward_uncheckpointed(x, cache);
}

torch::Tensor BlockImpl::forward_uncheckpointed(const torch::Tensor& x, KVCache* cache) {
  auto h = x + dropout_->forward(attention_->forward(ln1_->forward(x), cache));
  return h + mlp_branch(h);
}

torch::Tensor BlockImpl::mlp_branch(const torch::Tensor& h) { return dropout_->forward(mlp_module_->forward(ln2_->forward(h))); }

}  // namespace loom
