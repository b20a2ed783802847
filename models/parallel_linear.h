// The two tensor-parallel halves of a Linear (Megatron): column-parallel splits the output features
// over the TP ranks (its input is replicated; its output stays split), row-parallel splits the input
// features (its input is split; partial products are summed over the ranks, then the bias is added once).
// A column-parallel layer followed by a row-parallel one needs one all-reduce in forward and one in
// backward. With sequence parallelism the activations outside the pair are split along the sequence:
// the column-parallel layer all-gathers its input (reduce-scatter in backward) and the row-parallel one
// reduce-scatters its output (all-gather in backward), the same bytes as the all-reduce they replace.
// With no TP group, or one of size 1, each is exactly torch::nn::Linear's computation.
// Weights are drawn as make_linear draws the full matrix, then cut: with the same seed every layout
// starts from the same model.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tensor_parallel_rng.h"

namespace loom {

struct ParallelLinearOptions {
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
  double init_std = 0.02;
  // With tp.sequence_parallel(): column-parallel, the input is (B, T / tp, in), gathered along the sequence;
  // row-parallel, the output is reduce-scattered along the sequence, (B, T / tp, out), and the bias's
  // gradient summed over the group.
  TensorParallelism tp;
  // Column-parallel only: the output features are these sections (summing to out), each split over the
  // ranks on its own (fused QKV: {H*D, K*D, K*D}). Empty: one section.
  std::vector<int64_t> sections;
};

class ColumnParallelLinearImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  explicit ColumnParallelLinearImpl(const ParallelLinearOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in) -> (..., out / tp)
  // The input as the local product sees it: copied into the TP region, or gathered along the sequence.
  torch::Tensor region_input(const torch::Tensor& x) const;
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override;

  torch::Tensor weight, bias;  // (out / tp, in), (out / tp)

 private:
  Communicator* tp_;  // null without a split
  ShardLayout layout_;
  bool sequence_parallel_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  explicit RowParallelLinearImpl(const ParallelLinearOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in / tp) -> (..., out), replicated
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override;

  torch::Tensor weight, bias;  // (out, in / tp), (out) replicated

 private:
  Communicator* tp_;
  ShardLayout layout_;
  bool sequence_parallel_;
};
TORCH_MODULE(RowParallelLinear);

// The TP group's size and this rank's place in it; (1, 0) for no group.
inline int64_t tp_size(const Communicator* tp) { return tp != nullptr ? tp->size() : 1; }
inline int64_t tp_rank(const Communicator* tp) { return tp != nullptr ? tp->rank() : 0; }

}  // namespace loom
