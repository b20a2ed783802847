// AdamW whose step is ATen's fused multi-tensor kernel (at::_fused_adamw_, CPU and CUDA): one pass over
// each parameter updating weight, both moments and the decay together, instead of LibTorch AdamW's dozen
// separate full-tensor operations per parameter. Same update as torch::optim::AdamW; it keeps that class's
// parameter groups, options and per-parameter state (so set_learning_rate, apply_group_options and
// checkpoints are unchanged). AMSGrad falls back to the plain step.
#pragma once
#include <torch/torch.h>

namespace loom {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace loom
