// T5's relative position bias (Raffel et al. 2020; Hugging Face's T5Attention.compute_bias): a learned
// scalar per head and bucket of the distance key - query, added to the attention scores (model.position
// relative). Distances below half the buckets (of each direction's half, bidirectional) have a bucket
// each; longer ones share logarithmically wider buckets up to max_distance, beyond which all fall in the
// last. The encoder's bias is bidirectional (half the buckets for keys after the query), the decoder's
// causal (only keys at or before the query). One table per stack, computed once per forward and shared by
// every block of the stack (models/encoder_decoder.h passes it through BlockInputs::position_bias).
// Tensor parallelism: the table (buckets, H) is split by heads (columns) as the attention's heads are, so
// each rank computes the bias of its own heads; the whole table is drawn first, so any layout starts alike.
#pragma once
#include <torch/torch.h>

#include "parallel/tensor_parallel.h"

namespace loom {

// relative (any shape, int64: key position - query position) -> its buckets in [0, buckets).
torch::Tensor relative_position_buckets(const torch::Tensor& relative, bool bidirectional, int64_t buckets,
                                        int64_t max_distance);

struct RelativePositionBiasOptions {
  int64_t buckets = 32;
  int64_t max_distance = 128;
  int64_t n_heads = 0;  // all heads; a TP rank keeps n_heads / tp of them
  bool bidirectional = true;
  double init_std = 0.02;
  TensorParallelism tp;
};

class RelativePositionBiasImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  explicit RelativePositionBiasImpl(const RelativePositionBiasOptions& options);
  // Queries at positions [first, first + T) against keys at [key_first, key_first + S) -> (1, H_r, T, S),
  // in the table's dtype.
  torch::Tensor forward(int64_t first, int64_t T, int64_t key_first, int64_t S);
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override {
    return {{"weight", {1, {options_.n_heads}}}};
  }

  torch::Tensor weight;  // (buckets, H_r)

 private:
  RelativePositionBiasOptions options_;
};
TORCH_MODULE(RelativePositionBias);

}  // namespace loom
