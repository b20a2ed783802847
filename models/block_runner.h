// The one place a pipeline stage's blocks, embeddings and head run under the parallelism applied to them from
// outside the model (StagedModel::parallelize, as torchtitan's parallelize step): ZeRO-3's unit gathers
// (parallel/parameter_units.h) and activation checkpointing (models/recompute.h). A family's model hands its
// blocks over once, in forward order, and then only iterates them through here; it never names ZeRO-3 or
// recompute itself.
#pragma once
#include <torch/torch.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "core/config_enums.h"  // ActivationCheckpointing
#include "models/block.h"
#include "parallel/parameter_units.h"

namespace loom {

// What is applied to a stage's blocks; the default: nothing.
struct BlockParallelism {
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kNone;  // train.activation_checkpointing
  ParameterUnits* units = nullptr;  // ZeRO-3's, the stage's ends then its blocks (null: none)
};

class BlockRunner {
 public:
  // The stage's blocks in forward order (the encoder-decoder's encoder blocks, then its decoder blocks):
  // block i is ZeRO-3's unit 1 + i.
  void set_blocks(std::vector<Block> blocks) { blocks_ = std::move(blocks); }
  const std::vector<Block>& blocks() const { return blocks_; }
  void parallelize(const BlockParallelism& parallelism) { parallelism_ = parallelism; }
  bool gathers() const { return parallelism_.units != nullptr; }  // ZeRO-3

  // The embeddings, forward() -> (B, T, C): the ends gathered for them and freed after (their backward must
  // need no weights, as a lookup's does not).
  template <class Forward>
  torch::Tensor embeddings(Forward&& forward) {
    return run_embeddings(parallelism_.units, std::forward<Forward>(forward));
  }
  // Block i on x, its unit gathered around its forward and backward; recomputed in backward as checkpointing
  // says (training only, no cache). The gathers sit outside the recompute: it runs while the block is
  // gathered for its backward.
  torch::Tensor block(size_t i, const torch::Tensor& x, KVCache* cache = nullptr, const BlockInputs& inputs = {});
  // The head (whatever of the ends runs after the blocks), forward(hidden) -> output: the ends gathered for
  // it and kept for its backward, freed once that reaches hidden.
  template <class Forward>
  torch::Tensor head(const torch::Tensor& hidden, Forward&& forward) {
    return run_head(parallelism_.units, hidden, std::forward<Forward>(forward));
  }
  // Instead of embeddings() and head(): the ends gathered now and kept until the step's gradients are reduced
  // (the encoder-decoder's pre-norm encoder's final norm, in the ends, runs between its blocks).
  void keep_ends();

 private:
  std::vector<Block> blocks_;
  BlockParallelism parallelism_;
};

}  // namespace loom
