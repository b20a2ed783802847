#include "models/mlp.h"

namespace loom {

MlpImpl::MlpImpl(const MlpOptions& options) {
  up_ = register_module("up", torch::nn::Linear(options.d_model, options.d_ff));
  down_ = register_module("down", torch::nn::Linear(options.d_ff, options.d_model));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(up_->weight, 0.0, options.init_std);
  torch::nn::init::zeros_(up_->bias);
  torch::nn::init::normal_(down_->weight, 0.0, options.out_init_std);
  torch::nn::init::zeros_(down_->bias);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_->forward(torch::gelu(up_->forward(x), "tanh"));
}

}  // namespace loom
