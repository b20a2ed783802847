#include "optim/optimizer.h"

#include "optim/fused_adamw.h"

namespace loom {
namespace {
constexpr size_t kDecayGroup = 0;  // make_adamw's first group; the second never decays
}  // namespace

std::vector<std::vector<torch::Tensor>> weight_decay_groups(torch::nn::Module& model) {
  std::vector<std::vector<torch::Tensor>> groups(2);
  for (auto& p : model.parameters()) groups[p.dim() >= 2 ? kDecayGroup : 1].push_back(p);
  return groups;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<std::vector<torch::Tensor>>& groups,
                                                const OptimConfig& config) {
  auto options = torch::optim::AdamWOptions(config.lr).betas({config.betas[0], config.betas[1]}).eps(config.eps);
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  for (const auto& group : groups)
    param_groups.emplace_back(group, std::make_unique<torch::optim::AdamWOptions>(options));
  auto optimizer = std::make_unique<FusedAdamW>(std::move(param_groups), options);
  apply_group_options(*optimizer, config);
  return optimizer;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const OptimConfig& config) {
  return make_adamw(weight_decay_groups(model), config);
}

void apply_group_options(torch::optim::AdamW& optimizer, const OptimConfig& config) {
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(groups[i].options());
    o.lr(config.lr).betas({config.betas[0], config.betas[1]}).eps(config.eps);
    o.weight_decay(i == kDecayGroup ? config.weight_decay : 0.0);
  }
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm, Communicator* shards) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  // One reduction pass per gradient, no squared temporaries; the sum of squares in double.
  auto squared = torch::zeros({1}, torch::kDouble);
  if (!grads.empty()) squared += torch::stack(at::_foreach_norm(grads, 2)).to(torch::kDouble).pow(2).sum().cpu();
  if (shards != nullptr) shards->all_reduce(squared);
  const double norm = std::sqrt(squared.item<double>());
  if (max_norm > 0 && norm > max_norm) at::_foreach_mul_(grads, max_norm / (norm + 1e-6));
  return norm;
}

}  // namespace loom
