#include "data/corpus/lm_sampler.h"

#include "core/error.h"
#include "data/corpus/splitmix.h"

namespace loom {

int64_t LmSampler::window_start(const TokenCorpus& corpus, int64_t step, int64_t index) const {
  const int64_t positions = corpus.window_starts(seq_len_);
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  return static_cast<int64_t>(h % static_cast<uint64_t>(positions));
}

LmBatch LmSampler::train_batch(const TokenCorpus& corpus, int64_t step, int64_t first, int64_t count) const {
  std::vector<CorpusWindow> windows;
  for (int64_t i = first; i < first + count; ++i) windows.push_back(corpus.window(window_start(corpus, step, i), seq_len_));
  return batch_of(windows);
}

LmBatch LmSampler::eval_batch(const TokenCorpus& corpus, int64_t first, int64_t count) const {
  const int64_t windows = corpus.eval_windows(seq_len_);
  std::vector<CorpusWindow> rows;
  for (int64_t i = first; i < first + count; ++i) rows.push_back(corpus.eval_window(i % windows, seq_len_));
  return batch_of(rows);
}

LmBatch LmSampler::batch_of(const std::vector<CorpusWindow>& windows) const {
  using torch::indexing::Slice;
  // (B, T + 1) of one part of every window; undefined when the windows do not have it.
  auto stack = [&](torch::Tensor CorpusWindow::*part) {
    std::vector<torch::Tensor> rows;
    for (const auto& w : windows) rows.push_back(w.*part);
    return rows.front().defined() ? torch::stack(rows) : torch::Tensor();
  };
  const auto tokens = stack(&CorpusWindow::tokens);
  LmBatch batch;
  batch.inputs = tokens.index({Slice(), Slice(0, seq_len_)}).contiguous();
  batch.targets = tokens.index({Slice(), Slice(1, seq_len_ + 1)}).contiguous();
  if (const auto positions = stack(&CorpusWindow::positions); positions.defined())
    batch.positions = positions.index({Slice(), Slice(0, seq_len_)}).contiguous();
  if (const auto mask = stack(&CorpusWindow::loss_mask); mask.defined()) {
    const auto ignored = ~mask.index({Slice(), Slice(1, seq_len_ + 1)});  // a target counts where its token does
    // Not in place: with one row the targets' slice is already contiguous, a view sharing the inputs' memory.
    batch.targets = batch.targets.masked_fill(ignored, kIgnoreTarget);
    batch.ignored_targets = ignored.sum().item<int64_t>();
  }
  return batch;
}

}  // namespace loom
