#include "models/attention.h"

namespace loom {

AttentionImpl::AttentionImpl(const AttentionOptions& options) : options_(options) {
  const int64_t c = options.d_model;
  qkv_ = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c, 3 * c)));
  out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(c, c)));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(qkv_->weight, 0.0, options.init_std);
  torch::nn::init::zeros_(qkv_->bias);
  torch::nn::init::normal_(out_->weight, 0.0, options.out_init_std);
  torch::nn::init::zeros_(out_->bias);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, KVCache* cache) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t H = options_.n_heads, D = C / H;
  // (B, T, 3C) -> three (B, H, T, D)
  auto qkv = qkv_->forward(x).view({B, T, 3, H, D}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0], k = qkv[1], v = qkv[2];

  const int64_t past = cache != nullptr ? cache->length() : 0;
  if (cache != nullptr) {
    if (past > 0) {
      k = torch::cat({cache->k, k}, 2);
      v = torch::cat({cache->v, v}, 2);
    }
    cache->k = k;
    cache->v = v;
  }

  // Causal masking: with nothing cached the kernel's own causal mode; with a cache, new position i
  // (absolute past + i) sees keys [0, past + i], which for a single new token is every key.
  std::optional<torch::Tensor> mask;
  bool is_causal = options_.causal && past == 0 && T > 1;
  if (options_.causal && past > 0 && T > 1) {
    auto rows = torch::arange(T, torch::kLong).unsqueeze(1) + past;
    auto cols = torch::arange(past + T, torch::kLong).unsqueeze(0);
    mask = (cols <= rows).to(x.device());  // (T, S) bool, true = attend
  }
  const double dropout = is_training() ? options_.dropout : 0.0;
  auto y = at::scaled_dot_product_attention(q, k, v, mask, dropout, is_causal);  // (B, H, T, D)
  return out_->forward(y.transpose(1, 2).reshape({B, T, C}));
}

}  // namespace loom
