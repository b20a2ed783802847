#include "models/parallel_linear.h"

#include "models/layers.h"

namespace loom {

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ParallelLinearOptions& o)
    : tp_(tp_size(o.tp) > 1 ? o.tp : nullptr), layout_{0, o.sections.empty() ? std::vector<int64_t>{o.out} : o.sections} {
  const auto full = make_linear(o.in, o.out, o.bias, o.init_std);  // the RNG draws of the plain layer
  const int64_t parts = tp_size(o.tp), rank = tp_rank(o.tp);
  weight = register_parameter("weight", take_shard(full->weight.detach(), layout_, parts, rank));
  if (o.bias) bias = register_parameter("bias", take_shard(full->bias.detach(), layout_, parts, rank));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  return torch::nn::functional::linear(tp_ != nullptr ? copy_to_tp_region(x, *tp_) : x, weight, bias);
}

std::vector<std::pair<std::string, ShardLayout>> ColumnParallelLinearImpl::shard_layouts() const {
  std::vector<std::pair<std::string, ShardLayout>> out{{"weight", layout_}};
  if (bias.defined()) out.emplace_back("bias", layout_);
  return out;
}

RowParallelLinearImpl::RowParallelLinearImpl(const ParallelLinearOptions& o)
    : tp_(tp_size(o.tp) > 1 ? o.tp : nullptr), layout_{1, {o.in}} {
  const auto full = make_linear(o.in, o.out, o.bias, o.init_std);
  weight = register_parameter("weight", take_shard(full->weight.detach(), layout_, tp_size(o.tp), tp_rank(o.tp)));
  if (o.bias) bias = register_parameter("bias", full->bias.detach().clone());
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  if (tp_ == nullptr) return torch::nn::functional::linear(x, weight, bias);
  // Every rank holds a partial product; the bias joins the sum once, after it.
  auto y = reduce_from_tp_region(torch::nn::functional::linear(x, weight), *tp_);
  return bias.defined() ? y + bias : y;
}

std::vector<std::pair<std::string, ShardLayout>> RowParallelLinearImpl::shard_layouts() const {
  return {{"weight", layout_}};
}

}  // namespace loom
