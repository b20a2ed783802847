// Megatron-style tensor parallelism: the paired autograd functions every tensor-parallel layer is built
// from, and how a parameter is cut into per-rank shards. Each function's backward is the communication
// that makes the gradients of its inputs exact given the forward's:
//   copy_to_tp_region       identity           / all-reduce        (before a column-parallel layer)
//   reduce_from_tp_region   all-reduce         / identity          (after a row-parallel layer)
//   gather_from_tp_region   all-gather last dim / split last dim
//   scatter_to_tp_region    split last dim     / all-gather last dim
//   gather_from_sequence    all-gather dim 1   / reduce-scatter dim 1   (sequence parallelism)
//   scatter_to_sequence     split dim 1        / all-gather dim 1
//   reduce_scatter_to_sequence  reduce-scatter dim 1 / all-gather dim 1
//   replicate_sequence      all-gather dim 1   / split dim 1   (a replicated layer under sequence parallelism)
// With a group of one rank every function returns its input and records nothing for autograd.
// TensorParallelism says how a model is split: made once where the layout is set up, read by every layer.
// The layers themselves (column/row-parallel linear, vocab-parallel embedding) live in models/.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "core/config.h"  // sequence_parallel_applies
#include "parallel/communicator.h"

namespace loom {

class TensorParallelRng;  // parallel/tensor_parallel_rng.h

// How a model is split over its tensor-parallel group; the default is the whole model on one rank.
// Sequence parallelism (norms, dropout and residuals on sequence shards, Korthikanti et al.) and the
// dropout stream of sharded activations only mean something for a group of more than one rank: that is
// decided here, once per model (by core/config.h's sequence_parallel_applies), and every layer reads the
// result.
class TensorParallelism {
 public:
  TensorParallelism() = default;
  // group: the TP group (null: one rank); rng: the stream sharded activations drop with (null: the default
  // generator); sequence_parallel: asked for (parallel.sequence_parallel).
  TensorParallelism(Communicator* group, TensorParallelRng* rng, bool sequence_parallel)
      : group_(group),
        rng_(group != nullptr && group->size() > 1 ? rng : nullptr),
        sequence_parallel_(sequence_parallel_applies(sequence_parallel, group != nullptr ? group->size() : 1)) {}

  Communicator* group() const { return group_; }  // as given: null, or a group of any size
  int64_t size() const { return group_ != nullptr ? group_->size() : 1; }
  int64_t rank() const { return group_ != nullptr ? group_->rank() : 0; }
  // The group when there is one to split over (more than one rank), else null: layers communicate only then.
  Communicator* split_group() const { return size() > 1 ? group_ : nullptr; }
  TensorParallelRng* rng() const { return rng_; }  // null unless split
  bool sequence_parallel() const { return sequence_parallel_; }

 private:
  Communicator* group_ = nullptr;
  TensorParallelRng* rng_ = nullptr;
  bool sequence_parallel_ = false;
};

// A rank's share of n items split over `parts` ranks: [start, start + length). The first n % parts ranks
// hold one item more, so any n splits (a vocabulary of 50257 over 2 ranks).
struct ShardRange {
  int64_t start = 0;
  int64_t length = 0;
};
ShardRange shard_range(int64_t n, int64_t parts, int64_t rank);

torch::Tensor copy_to_tp_region(const torch::Tensor& x, Communicator& group);
torch::Tensor reduce_from_tp_region(const torch::Tensor& x, Communicator& group);
// x: (..., n_r) with n_r = shard_range(full, size, rank).length -> (..., full). full = -1: size * n_r.
torch::Tensor gather_from_tp_region(const torch::Tensor& x, Communicator& group, int64_t full = -1);
// x: (..., full) -> (..., n_r), this rank's shard_range of the last dim.
torch::Tensor scatter_to_tp_region(const torch::Tensor& x, Communicator& group);
// x: (B, T/size, C) -> (B, T, C), rank r's chunk at [r * T/size, (r + 1) * T/size).
torch::Tensor gather_from_sequence(const torch::Tensor& x, Communicator& group);
// x: (B, T, C) partial sums -> (B, T/size, C), this rank's chunk of the sum over ranks.
torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, Communicator& group);
// x: (B, T, C) replicated -> (B, T/size, C), this rank's chunk (no communication in forward).
torch::Tensor scatter_to_sequence(const torch::Tensor& x, Communicator& group);
// x: (B, T/size, C) -> (B, T, C) for a layer every rank computes whole on the same tokens (the MoE MLP's
// replicated router and experts under sequence parallelism, then scatter_to_sequence): the gradients reaching
// it are then equal on every rank, and backward keeps this rank's chunk of them (no sum, as gather_from_sequence's).
torch::Tensor replicate_sequence(const torch::Tensor& x, Communicator& group);

// How a tensor-parallel parameter is cut: along `dim`, each section (full extents, summing to the full
// size) is split over the ranks by shard_range and a rank's pieces are concatenated in section order. A
// fused QKV weight is {H*D, K*D, K*D} along dim 0, so each rank keeps whole heads of q, k and v.
struct ShardLayout {
  int64_t dim = 0;
  std::vector<int64_t> sections;
};
torch::Tensor take_shard(const torch::Tensor& full, const ShardLayout& layout, int64_t parts, int64_t rank);
// The inverse: every rank's shard (in rank order) -> the full tensor.
torch::Tensor join_shards(const std::vector<torch::Tensor>& shards, const ShardLayout& layout);

// A module holding tensor-parallel parameters says how each of its own parameters is cut; parameters
// not listed are replicated (identical on every rank of the TP group, and so are their gradients).
class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;
  virtual std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const = 0;
};

// Every sharded parameter of a model by its full name ("blocks.0.attention.qkv.weight").
std::map<std::string, ShardLayout> shard_layouts(const torch::nn::Module& model);

}  // namespace loom
