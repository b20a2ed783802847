#include "optim/fused_adamw.h"

#include <map>

namespace loom {

torch::Tensor FusedAdamW::step(LossClosure closure) {
  for (auto& group : param_groups_)  // not needed by loom; kept correct by the plain step
    if (static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()) return torch::optim::AdamW::step(closure);
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    std::map<int64_t, torch::Tensor> step_tensors;  // the kernel reads the (already counted) step as a tensor
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto state = std::make_unique<torch::optim::AdamWParamState>();
        state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(state);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      auto& step = step_tensors[state.step()];
      if (!step.defined()) step = torch::full({}, static_cast<double>(state.step()), p.options().dtype(torch::kFloat));
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      steps.push_back(step);
    }
    if (params.empty()) continue;
    const auto [beta1, beta2] = options.betas();
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, options.lr(), beta1, beta2,
                      options.weight_decay(), options.eps(), /*amsgrad=*/false, /*maximize=*/false);
  }
  return loss;
}

}  // namespace loom
