// The token embedding split by vocabulary rows over the TP ranks (Megatron): rank r keeps the rows of
// shard_range(V, tp, r), looks up the tokens that fall in its range (zeros for the rest), and the
// all-reduce over the group assembles every token's row. Tied to the LM head, the same shard computes
// this rank's slice of the logits, which vocab-parallel cross-entropy takes without gathering them.
// With no TP group, or one of size 1, it is torch::nn::Embedding's computation.
#pragma once
#include <torch/torch.h>

#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"

namespace loom {

struct VocabParallelEmbeddingOptions {
  int64_t vocab_size = 0;
  int64_t dim = 0;
  TensorParallelism tp;  // with tp.sequence_parallel(), logits() takes sequence shards (B, T / tp, C) and gathers them
};

class VocabParallelEmbeddingImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  explicit VocabParallelEmbeddingImpl(const VocabParallelEmbeddingOptions& options);
  torch::Tensor forward(const torch::Tensor& tokens);  // (B, T) int64 -> (B, T, C), replicated
  // hidden: (B, T, C) replicated, or (B, T / tp, C) with sequence parallelism -> this rank's logits
  // (B, T, V_r) (the tied LM head).
  torch::Tensor logits(const torch::Tensor& hidden);
  // Redraws the full table ~ N(0, std) (the RNG draws of normal_ on a (V, C) tensor) and keeps this
  // rank's rows.
  void reset_normal(double std);
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override;
  ShardRange range() const { return range_; }

  torch::Tensor weight;  // (V_r, C)

 private:
  VocabParallelEmbeddingOptions options_;
  Communicator* tp_;
  ShardRange range_;
};
TORCH_MODULE(VocabParallelEmbedding);

}  // namespace loom
