#include "parallel/tensor_parallel.h"

#include "core/error.h"

namespace loom {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

ShardRange shard_range(int64_t n, int64_t parts, int64_t rank) {
  LOOM_CHECK(parts >= 1 && rank >= 0 && rank < parts, "shard_range: rank ", rank, " of ", parts);
  const int64_t base = n / parts, extra = n % parts;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

namespace {

// The autograd context keeps the group as an integer: IValue holds no raw pointers. Groups outlive the
// graphs built over them (the mesh owns them for the whole run).
void keep_group(AutogradContext* ctx, Communicator& group) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&group));
}
Communicator& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

torch::Tensor all_reduced(const torch::Tensor& x, Communicator& group) {
  auto y = x.clone(at::MemoryFormat::Contiguous);
  group.all_reduce(y);
  return y;
}

// x: (..., n_r) -> (..., full). Shards may differ by one element: each is padded to the largest for the
// collective (which moves equal chunks) and trimmed after.
torch::Tensor gather_last(const torch::Tensor& x, Communicator& group, int64_t full) {
  const int64_t n = group.size(), widest = shard_range(full, n, 0).length;
  auto mine = x.movedim(-1, 0);  // (n_r, ...)
  if (mine.size(0) < widest) {
    auto pad_shape = mine.sizes().vec();
    pad_shape[0] = widest - mine.size(0);
    mine = torch::cat({mine, torch::zeros(pad_shape, mine.options())}, 0);
  }
  mine = mine.contiguous();
  auto shape = mine.sizes().vec();
  shape[0] *= n;
  auto gathered = torch::empty(shape, mine.options());  // (n * widest, ...)
  group.all_gather(mine, gathered);
  std::vector<torch::Tensor> pieces;
  for (int64_t r = 0; r < n; ++r) pieces.push_back(gathered.narrow(0, r * widest, shard_range(full, n, r).length));
  return torch::cat(pieces, 0).movedim(0, -1).contiguous();
}

// x: (..., full) -> (..., n_r), this rank's range.
torch::Tensor split_last(const torch::Tensor& x, Communicator& group) {
  const auto range = shard_range(x.size(-1), group.size(), group.rank());
  return x.narrow(-1, range.start, range.length).contiguous();
}

// x: (B, T_r, C) -> (B, T, C).
torch::Tensor gather_dim1(const torch::Tensor& x, Communicator& group) {
  auto mine = x.movedim(1, 0).contiguous();  // (T_r, B, C)
  auto shape = mine.sizes().vec();
  shape[0] *= group.size();
  auto gathered = torch::empty(shape, mine.options());
  group.all_gather(mine, gathered);
  return gathered.movedim(0, 1).contiguous();
}

// x: (B, T, C) -> (B, T_r, C), this rank's chunk of the sum over ranks.
torch::Tensor reduce_scatter_dim1(const torch::Tensor& x, Communicator& group) {
  const int64_t n = group.size();
  LOOM_CHECK(x.size(1) % n == 0, "sequence parallelism: the sequence length ", x.size(1),
             " is not a multiple of the tensor-parallel size ", n);
  auto all = x.movedim(1, 0).contiguous();  // (T, B, C): rank r's chunk is rows [r T/n, (r+1) T/n)
  auto shape = all.sizes().vec();
  shape[0] /= n;
  auto mine = torch::empty(shape, all.options());
  group.reduce_scatter(all, mine);
  return mine.movedim(0, 1).contiguous();
}

// x: (B, T, C) -> (B, T_r, C), this rank's chunk.
torch::Tensor split_dim1(const torch::Tensor& x, Communicator& group) {
  const int64_t n = group.size();
  LOOM_CHECK(x.size(1) % n == 0, "sequence parallelism: the sequence length ", x.size(1),
             " is not a multiple of the tensor-parallel size ", n);
  const int64_t chunk = x.size(1) / n;
  return x.narrow(1, group.rank() * chunk, chunk).contiguous();
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group) {
    keep_group(ctx, *group);
    return x;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {all_reduced(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, Communicator* group) {
    return all_reduced(x, *group);
  }
  static tensor_list backward(AutogradContext*, tensor_list grads) { return {grads[0], torch::Tensor()}; }
};

struct GatherFromRegion : torch::autograd::Function<GatherFromRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group, int64_t full) {
    keep_group(ctx, *group);
    return gather_last(x, *group, full);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {split_last(grads[0], group_of(ctx)), torch::Tensor(), torch::Tensor()};
  }
};

struct ScatterToRegion : torch::autograd::Function<ScatterToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group) {
    keep_group(ctx, *group);
    ctx->saved_data["full"] = x.size(-1);
    return split_last(x, *group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {gather_last(grads[0], group_of(ctx), ctx->saved_data["full"].toInt()), torch::Tensor()};
  }
};

struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group) {
    keep_group(ctx, *group);
    return gather_dim1(x, *group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {reduce_scatter_dim1(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceScatterToSequence : torch::autograd::Function<ReduceScatterToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group) {
    keep_group(ctx, *group);
    return reduce_scatter_dim1(x, *group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {gather_dim1(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ScatterToSequence : torch::autograd::Function<ScatterToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group) {
    keep_group(ctx, *group);
    return split_dim1(x, *group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {gather_dim1(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReplicateSequence : torch::autograd::Function<ReplicateSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* group) {
    keep_group(ctx, *group);
    return gather_dim1(x, *group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {split_dim1(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tp_region(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : CopyToRegion::apply(x, &group);
}

torch::Tensor reduce_from_tp_region(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : ReduceFromRegion::apply(x, &group);
}

torch::Tensor gather_from_tp_region(const torch::Tensor& x, Communicator& group, int64_t full) {
  if (group.size() == 1) return x;
  if (full < 0) full = x.size(-1) * group.size();
  LOOM_CHECK(shard_range(full, group.size(), group.rank()).length == x.size(-1), "gather_from_tp_region: a shard of ",
             x.size(-1), " is not rank ", group.rank(), "'s share of ", full);
  return GatherFromRegion::apply(x, &group, full);
}

torch::Tensor scatter_to_tp_region(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : ScatterToRegion::apply(x, &group);
}

torch::Tensor gather_from_sequence(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : GatherFromSequence::apply(x, &group);
}

torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : ReduceScatterToSequence::apply(x, &group);
}

torch::Tensor scatter_to_sequence(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : ScatterToSequence::apply(x, &group);
}

torch::Tensor replicate_sequence(const torch::Tensor& x, Communicator& group) {
  return group.size() == 1 ? x : ReplicateSequence::apply(x, &group);
}

torch::Tensor take_shard(const torch::Tensor& full, const ShardLayout& layout, int64_t parts, int64_t rank) {
  std::vector<torch::Tensor> pieces;
  int64_t offset = 0;
  for (const int64_t section : layout.sections) {
    const auto range = shard_range(section, parts, rank);
    pieces.push_back(full.narrow(layout.dim, offset + range.start, range.length));
    offset += section;
  }
  LOOM_CHECK(offset == full.size(layout.dim), "take_shard: sections sum to ", offset, " but the tensor has ",
             full.size(layout.dim), " along dim ", layout.dim);
  return torch::cat(pieces, layout.dim).contiguous();
}

torch::Tensor join_shards(const std::vector<torch::Tensor>& shards, const ShardLayout& layout) {
  const auto parts = static_cast<int64_t>(shards.size());
  std::vector<int64_t> offsets(shards.size(), 0);  // where each shard's next section starts
  std::vector<torch::Tensor> pieces;
  for (const int64_t section : layout.sections) {
    for (int64_t r = 0; r < parts; ++r) {
      const int64_t length = shard_range(section, parts, r).length;
      pieces.push_back(shards[r].narrow(layout.dim, offsets[r], length));
      offsets[r] += length;
    }
  }
  return torch::cat(pieces, layout.dim);
}

std::map<std::string, ShardLayout> shard_layouts(const torch::nn::Module& model) {
  std::map<std::string, ShardLayout> out;
  for (const auto& item : model.named_modules()) {
    const auto* layer = dynamic_cast<const TensorParallelLayer*>(item.value().get());
    if (layer == nullptr) continue;
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& [name, layout] : layer->shard_layouts()) out[prefix + name] = layout;
  }
  return out;
}

}  // namespace loom
