#include "optim/loss_scaler.h"

#include "core/error.h"

namespace loom {

LossScaler::LossScaler(const PrecisionConfig& precision)
    : enabled_(precision.dtype == Dtype::kFp16),
      scale_(enabled_ ? precision.loss_scale_init : 1.0),
      growth_factor_(precision.loss_scale_growth),
      backoff_factor_(precision.loss_scale_backoff),
      growth_interval_(precision.loss_scale_growth_interval) {}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_ : loss;
}

bool LossScaler::unscale(const std::vector<torch::Tensor>& parameters, Communicator* shards) {
  LOOM_CHECK(enabled_, "LossScaler::unscale: loss scaling is off (precision.dtype is not fp16)");
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return true;
  torch::NoGradGuard no_grad;
  auto found_inf = torch::zeros({1}, torch::TensorOptions(torch::kFloat).device(grads.front().device()));
  // One fused pass: multiplies every gradient by 1/scale and flags any inf/nan it meets.
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch::full({1}, 1.0 / scale_, found_inf.options()));
  if (shards != nullptr) {
    auto flag = found_inf.to(torch::kCPU, torch::kDouble).reshape({1});
    shards->all_reduce(flag);
    return flag.item<double>() == 0;
  }
  return found_inf.item<float>() == 0;
}

void LossScaler::update(bool finite) {
  if (!enabled_) return;
  if (!finite) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ >= growth_interval_) {
    scale_ *= growth_factor_;
    growth_tracker_ = 0;
  }
}

torch::Tensor LossScaler::state() const {
  return torch::tensor({scale_, static_cast<double>(growth_tracker_)}, torch::kDouble);
}

void LossScaler::load_state(const torch::Tensor& state) {
  LOOM_CHECK(state.numel() == 2, "loss scaler state must hold (scale, growth_tracker)");
  const auto values = state.to(torch::kDouble).contiguous();
  scale_ = values[0].item<double>();
  growth_tracker_ = static_cast<int64_t>(values[1].item<double>());
}

}  // namespace loom
