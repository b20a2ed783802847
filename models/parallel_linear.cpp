#include "models/parallel_linear.h"

#include "models/few_rows_linear.h"
#include "models/layers.h"

namespace loom {

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ParallelLinearOptions& o)
    : tp_(o.tp.split_group()),
      layout_{0, o.sections.empty() ? std::vector<int64_t>{o.out} : o.sections},
      sequence_parallel_(o.tp.sequence_parallel()) {
  const auto full = make_linear(o.in, o.out, o.bias, o.init_std);  // the RNG draws of the plain layer
  const int64_t parts = o.tp.size(), rank = o.tp.rank();
  weight = register_parameter("weight", take_shard(full->weight.detach(), layout_, parts, rank));
  if (o.bias) bias = register_parameter("bias", take_shard(full->bias.detach(), layout_, parts, rank));
}

torch::Tensor ColumnParallelLinearImpl::region_input(const torch::Tensor& x) const {
  if (tp_ == nullptr) return x;
  return sequence_parallel_ ? gather_from_sequence(x, *tp_) : copy_to_tp_region(x, *tp_);
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  return linear_forward(region_input(x), weight, bias);
}

std::vector<std::pair<std::string, ShardLayout>> ColumnParallelLinearImpl::shard_layouts() const {
  std::vector<std::pair<std::string, ShardLayout>> out{{"weight", layout_}};
  if (bias.defined()) out.emplace_back("bias", layout_);
  return out;
}

RowParallelLinearImpl::RowParallelLinearImpl(const ParallelLinearOptions& o)
    : tp_(o.tp.split_group()), layout_{1, {o.in}}, sequence_parallel_(o.tp.sequence_parallel()) {
  const auto full = make_linear(o.in, o.out, o.bias, o.init_std);
  weight = register_parameter("weight", take_shard(full->weight.detach(), layout_, o.tp.size(), o.tp.rank()));
  if (o.bias) bias = register_parameter("bias", full->bias.detach().clone());
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  if (tp_ == nullptr) return linear_forward(x, weight, bias);
  // Every rank holds a partial product; the bias joins the sum once, after it.
  const auto partial = linear_forward(x, weight);
  if (!sequence_parallel_) {
    auto y = reduce_from_tp_region(partial, *tp_);
    return bias.defined() ? y + bias : y;
  }
  // (B, T, out) partial sums -> (B, T / tp, out). The bias meets only this rank's positions: its gradient
  // is summed over the group (copy_to_tp_region's backward) so every rank steps it alike.
  auto y = reduce_scatter_to_sequence(partial, *tp_);
  return bias.defined() ? y + copy_to_tp_region(bias, *tp_) : y;
}

std::vector<std::pair<std::string, ShardLayout>> RowParallelLinearImpl::shard_layouts() const {
  return {{"weight", layout_}};
}

}  // namespace loom
