#include "models/vocab_parallel_embedding.h"

#include "models/few_rows_linear.h"
#include "models/parallel_linear.h"

namespace loom {

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const VocabParallelEmbeddingOptions& o)
    : options_(o),
      tp_(o.tp.split_group()),
      range_(shard_range(o.vocab_size, o.tp.size(), o.tp.rank())) {
  weight = register_parameter("weight", torch::empty({range_.length, o.dim}));
  reset_normal(1.0);  // torch::nn::Embedding's initialization
}

void VocabParallelEmbeddingImpl::reset_normal(double std) {
  torch::NoGradGuard no_grad;
  auto full = torch::empty({options_.vocab_size, options_.dim}, weight.options());
  torch::nn::init::normal_(full, 0.0, std);
  weight.copy_(full.narrow(0, range_.start, range_.length));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& tokens) {
  if (tp_ == nullptr) return torch::embedding(weight, tokens);
  // Tokens outside this rank's rows look up row 0 and are zeroed; the sum over ranks fills them in.
  const auto outside = (tokens < range_.start) | (tokens >= range_.start + range_.length);  // (B, T)
  const auto local = (tokens - range_.start).masked_fill(outside, 0);
  auto rows = torch::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);  // (B, T, C)
  return reduce_from_tp_region(rows, *tp_);
}

torch::Tensor VocabParallelEmbeddingImpl::logits(const torch::Tensor& hidden) {
  if (tp_ == nullptr) return linear_forward(hidden, weight);
  const auto h = options_.tp.sequence_parallel() ? gather_from_sequence(hidden, *tp_) : copy_to_tp_region(hidden, *tp_);
  return linear_forward(h, weight);
}

std::vector<std::pair<std::string, ShardLayout>> VocabParallelEmbeddingImpl::shard_layouts() const {
  return {{"weight", ShardLayout{0, {options_.vocab_size}}}};
}

}  // namespace loom
