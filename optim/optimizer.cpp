#include "optim/optimizer.h"

namespace loom {
namespace {
constexpr size_t kDecayGroup = 0;  // make_adamw's first group; the second never decays
}  // namespace

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const OptimConfig& config) {
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = torch::optim::AdamWOptions(config.lr).betas({config.betas[0], config.betas[1]}).eps(config.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options));
  auto optimizer = std::make_unique<torch::optim::AdamW>(std::move(groups), options);
  apply_group_options(*optimizer, config);
  return optimizer;
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

double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> squares;
  for (const auto& p : parameters)
    if (p.grad().defined()) squares.push_back(p.grad().to(torch::kFloat).pow(2).sum());
  if (squares.empty()) return 0.0;
  const double norm = torch::stack(squares).sum().sqrt().item<double>();
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& p : parameters)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

}  // namespace loom
