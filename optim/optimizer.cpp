#include "optim/optimizer.h"

#include <ATen/Parallel.h>

#include <limits>
#include <set>

#include "optim/fused_adamw.h"
#include "parallel/tensor_parallel.h"

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

namespace {

std::vector<torch::Tensor> gradients_of(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

// The sum of the squares of t's elements as a double scalar on t's device, accumulated in double. Each
// square of a float is exact in double and the sum's rounding is ~1e-13 relative in any order for a
// million elements, so a shard's, a stage's or a whole tensor's sums add up to the same norm far below a
// float's precision: every layout's clip coefficient is the same float, and runs that differ only in how
// the gradients are cut (ZeRO, pipeline stages) clip identically (bf16 weights would amplify a difference).
torch::Tensor sum_of_squares(const torch::Tensor& t) {
  if (!t.is_cpu() || t.scalar_type() != torch::kFloat)
    return at::linalg_vector_norm(t, 2, {}, false, torch::kDouble).square();
  const auto flat = t.contiguous();
  const float* x = flat.data_ptr<float>();
  constexpr int64_t kGrain = 1 << 16;
  const double sum = at::parallel_reduce(
      int64_t{0}, flat.numel(), kGrain, 0.0,
      [x](int64_t begin, int64_t end, double partial) {
        double lanes[8] = {};  // independent sums, so the compiler can vectorize
        int64_t i = begin;
        for (; i + 8 <= end; i += 8)
          for (int k = 0; k < 8; ++k) lanes[k] += static_cast<double>(x[i + k]) * x[i + k];
        for (; i < end; ++i) partial += static_cast<double>(x[i]) * x[i];
        for (double lane : lanes) partial += lane;
        return partial;
      },
      std::plus<double>());
  return torch::scalar_tensor(sum, torch::kDouble);
}

}  // namespace

GradientNorm gradient_norm(const std::vector<torch::Tensor>& parameters, Communicator* shards, Communicator* tp,
                           const std::vector<std::vector<ElementRange>>& tp_sharded, Communicator* pp,
                           const std::vector<std::vector<ElementRange>>& duplicated) {
  const bool split = tp != nullptr && tp->size() > 1;
  const bool staged = pp != nullptr && pp->size() > 1;
  TORCH_CHECK(!split || tp_sharded.size() == parameters.size(), "gradient_norm: one tp_sharded entry per parameter");
  TORCH_CHECK(duplicated.empty() || duplicated.size() == parameters.size(),
              "gradient_norm: one duplicated entry per parameter");
  auto squared = torch::zeros({1}, torch::kDouble);
  auto sharded_squared = torch::zeros({1}, torch::kDouble);  // TP shards: summed over the TP group
  if (!split && duplicated.empty()) {
    // Summed on the gradients' device: one copy to the host, not one per parameter.
    std::vector<torch::Tensor> sums;
    for (const auto& g : gradients_of(parameters)) sums.push_back(sum_of_squares(g).reshape({1}));
    if (!sums.empty()) squared += torch::cat(sums).sum().cpu();
  } else {
    auto sum_of = [](const torch::Tensor& g, const std::vector<ElementRange>& ranges) {
      auto part = torch::zeros({1}, torch::kDouble);
      for (const auto& r : ranges) part += sum_of_squares(g.view(-1).narrow(0, r.first, r.length)).cpu();
      return part;
    };
    for (size_t i = 0; i < parameters.size(); ++i) {
      const auto& g = parameters[i].grad();
      if (!g.defined()) continue;
      const auto part = split ? sum_of(g, tp_sharded[i]) : torch::zeros({1}, torch::kDouble);
      // A duplicated parameter is TP-sharded or replicated as a whole: its ranges are then its tp ranges.
      const auto twice = duplicated.empty() ? torch::zeros({1}, torch::kDouble) : sum_of(g, duplicated[i]);
      const bool twice_sharded = split && !tp_sharded[i].empty();
      sharded_squared += part - (twice_sharded ? twice : torch::zeros({1}, torch::kDouble));
      squared += sum_of_squares(g).cpu() - part - (twice_sharded ? torch::zeros({1}, torch::kDouble) : twice);
    }
  }
  GradientNorm result;
  const double local = (squared + sharded_squared).item<double>();
  result.local_finite = std::isfinite(local) && std::sqrt(local) <= std::numeric_limits<float>::max();
  if (shards != nullptr) shards->all_reduce(squared);
  if (shards != nullptr && split) shards->all_reduce(sharded_squared);
  if (staged) {
    pp->all_reduce(squared);
    if (split) pp->all_reduce(sharded_squared);
  }
  if (split) {
    tp->all_reduce(sharded_squared);
    squared += sharded_squared;
  }
  result.norm = std::sqrt(squared.item<double>());
  return result;
}

void clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm, double norm) {
  if (max_norm > 0 && norm > max_norm) at::_foreach_mul_(gradients_of(parameters), max_norm / (norm + 1e-6));
}

std::vector<std::vector<ElementRange>> parameter_ranges(const std::vector<torch::Tensor>& parameters,
                                                        const std::vector<std::vector<ParameterSlice>>& slices) {
  std::set<const void*> wanted;
  for (const auto& p : parameters) wanted.insert(p.unsafeGetTensorImpl());
  std::vector<std::vector<ElementRange>> ranges;
  for (const auto& tensor_slices : slices) {
    ranges.emplace_back();
    for (const auto& slice : tensor_slices)
      if (wanted.count(slice.parameter.unsafeGetTensorImpl()) > 0) ranges.back().push_back({slice.offset, slice.length});
  }
  return ranges;
}

std::vector<std::vector<ElementRange>> tensor_parallel_ranges(const torch::nn::Module& model,
                                                              const std::vector<std::vector<ParameterSlice>>& slices) {
  const auto layouts = shard_layouts(model);
  std::vector<torch::Tensor> sharded;
  for (const auto& p : model.named_parameters())
    if (layouts.count(p.key()) > 0) sharded.push_back(p.value());
  return parameter_ranges(sharded, slices);
}

}  // namespace loom
