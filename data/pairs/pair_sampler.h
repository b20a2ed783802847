// Token-based, length-bucketed batches of translation pairs (train.batch_tokens), stateless like the
// LM sampler: the global batch of a step is a pure function of (seed, step), so resume needs only the
// step and a DP rank takes its slice of the global batch by index (data/corpus/batch_slices.h).
//
// How: the pairs sorted by (target length, source length) are cut greedily into batches whose padded
// size, pairs * (longest source + longest target + 1), stays within batch_tokens (a batch closes only
// once it has min_pairs pairs, so only a batch of exactly min_pairs pairs may exceed the budget). The
// cut depends on the lengths alone, so every epoch has the same batches_per_epoch() batches of the
// same shapes; each epoch shuffles which of the pairs of equal lengths land in which batch, and the
// order of the batches. Epoch guarantee: the steps [e * N, (e + 1) * N), N = batches_per_epoch(),
// use every pair of the file exactly once.
// Evaluation: eval_batches() batches cut the same way, in sorted order, covering the file once.
#pragma once
#include <cstdint>
#include <vector>

#include "data/pairs/pair_file.h"
#include "data/pairs/seq2seq_batch.h"

namespace loom {

struct PairSamplerOptions {
  int64_t batch_tokens = 4096;  // padded source + target tokens per global batch
  int64_t min_pairs = 1;        // fewest pairs per batch (training uses 1: the cut must not depend on the layout)
  uint64_t seed = 0;
};

class PairSampler {
 public:
  // Keeps a reference to `file`, which must outlive the sampler. Throws loom::ConfigError for a bad option.
  PairSampler(const PairFile& file, PairSamplerOptions options);

  int64_t batches_per_epoch() const { return static_cast<int64_t>(bounds_.size()) - 1; }

  // Pair indices of the global batch of `step` (>= 0), shortest target first.
  std::vector<int64_t> train_pairs(int64_t step) const;
  // Pairs [first, first + count) of the global batch of `step`, laid out as in seq2seq_batch.h.
  Seq2SeqBatch train_batch(int64_t step, int64_t first, int64_t count) const;

  int64_t eval_batches() const { return batches_per_epoch(); }
  // Pair indices of evaluation batch `batch` in [0, eval_batches()): a fixed order, no shuffling.
  std::vector<int64_t> eval_pairs(int64_t batch) const;

  const PairFile& file() const { return file_; }
  const PairSamplerOptions& options() const { return options_; }

 private:
  // The sorted order with equal-length runs shuffled for `epoch` (cached: steps come in order).
  const std::vector<int64_t>& epoch_order(int64_t epoch) const;
  std::vector<int64_t> batch_order(int64_t epoch) const;

  const PairFile& file_;
  PairSamplerOptions options_;
  std::vector<int64_t> sorted_;  // pair indices by (target length, source length, index)
  std::vector<int64_t> runs_;    // starts of runs of equal (target, source) length in sorted_, then its size
  std::vector<int64_t> bounds_;  // batch b is sorted positions [bounds_[b], bounds_[b + 1])
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// Pairs of the file as one padded batch (data/pairs/seq2seq_batch.h).
Seq2SeqBatch make_pair_batch(const PairFile& file, const std::vector<int64_t>& pairs);

}  // namespace loom
