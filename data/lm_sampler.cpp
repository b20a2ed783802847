#include "data/lm_sampler.h"

#include "core/error.h"
#include "data/splitmix.h"

namespace loom {

int64_t LmSampler::window_start(const TokenCorpus& corpus, int64_t step, int64_t index) const {
  const int64_t positions = corpus.window_starts(seq_len_);
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  return static_cast<int64_t>(h % static_cast<uint64_t>(positions));
}

LmBatch LmSampler::train_batch(const TokenCorpus& corpus, int64_t step, int64_t first, int64_t count) const {
  std::vector<torch::Tensor> windows;
  for (int64_t i = first; i < first + count; ++i) windows.push_back(corpus.window(window_start(corpus, step, i), seq_len_));
  return batch_of(windows);
}

LmBatch LmSampler::eval_batch(const TokenCorpus& corpus, int64_t first, int64_t count) const {
  const int64_t windows = corpus.eval_windows(seq_len_);
  std::vector<torch::Tensor> rows;
  for (int64_t i = first; i < first + count; ++i) rows.push_back(corpus.eval_window(i % windows, seq_len_));
  return batch_of(rows);
}

LmBatch LmSampler::batch_of(const std::vector<torch::Tensor>& windows) const {
  auto stacked = torch::stack(windows);  // (B, T + 1)
  using torch::indexing::Slice;
  return {stacked.index({Slice(), Slice(0, seq_len_)}).contiguous(),
          stacked.index({Slice(), Slice(1, seq_len_ + 1)}).contiguous()};
}

}  // namespace loom
