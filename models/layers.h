// Small pieces every layer is built from: an initialized Linear (bias optional) and the Norm that is
// either LayerNorm or RMSNorm. Header-only; the layers that use them hold no knowledge of configs.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "core/config_enums.h"  // NormKind
#include "models/norm.h"
#include "parallel/tensor_parallel.h"

namespace loom {

// Linear(in, out) with weights ~ N(0, std) and zero bias, or no bias at all.
inline torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias, double std) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(linear->weight, 0.0, std);
  if (bias) torch::nn::init::zeros_(linear->bias);
  return linear;
}

struct NormOptions {
  int64_t dim = 0;
  NormKind kind = NormKind::kLayerNorm;
  double eps = 1e-5;
  // Sequence parallelism: the TP group whose ranks each normalize their own positions. The weights then
  // see a part of the batch on each rank, so their gradients are summed over the group.
  Communicator* sequence_group = nullptr;
};

// LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias. RMSNorm: x / sqrt(mean(x^2) + eps) * weight,
// computed in fp32 whatever the input (as Hugging Face LLaMA), so bf16 autocast does not lose the scale.
// Parameters are named weight (and bias) like torch::nn::LayerNorm's, so checkpoints read either way.
class NormImpl : public torch::nn::Module {
 public:
  explicit NormImpl(const NormOptions& options) : options_(options) {
    weight_ = register_parameter("weight", torch::ones({options.dim}));
    if (options.kind == NormKind::kLayerNorm) bias_ = register_parameter("bias", torch::zeros({options.dim}));
  }

  torch::Tensor forward(const torch::Tensor& x) {  // (..., C) -> (..., C)
    const auto weight = shared(weight_), bias = shared(bias_);
    if (options_.kind == NormKind::kLayerNorm) return torch::layer_norm(x, {options_.dim}, weight, bias, options_.eps);
    const auto h = x.to(c10::promoteTypes(x.scalar_type(), torch::kFloat));
    return weight * (h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + options_.eps)).to(x.scalar_type());
  }

  // forward(x) for a caller that only multiplies the result by weights (a pre-norm sublayer's input
  // projections): under bf16 autocast on the CPU an fp32 x is normalized straight into bf16 by loom's row
  // kernels (models/norm.h), the values the product would get from forward(x) after its own cast. Elsewhere
  // it is forward(x). (The final norm stays forward(x): the fused loss keeps its input gradient in fp32.)
  torch::Tensor forward_into_matmul(const torch::Tensor& x) {
    const auto weight = shared(weight_), bias = shared(bias_);
    const bool bf16_autocast = at::autocast::is_autocast_enabled(at::kCPU) &&
                               at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
    if (!bf16_autocast || !fused_norm_applies(x, weight, bias)) return forward(x);
    return fused_norm(x, weight, bias, options_.eps, options_.kind == NormKind::kRmsNorm, at::kBFloat16);
  }

 private:
  // A parameter as the forward uses it: with a sequence group, its gradient sums over the group's ranks.
  torch::Tensor shared(const torch::Tensor& p) const {
    return options_.sequence_group != nullptr && p.defined() ? copy_to_tp_region(p, *options_.sequence_group) : p;
  }

  NormOptions options_;
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(Norm);

}  // namespace loom
