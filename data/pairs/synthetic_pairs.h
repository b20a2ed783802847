// Synthetic translation tasks for testing the encoder-decoder end to end in minutes: random token
// sequences (ids 3 .. vocab - 1, lengths uniform in [min_len, max_len]) and their reversal (`reverse`)
// or themselves (`copy`). Pair i of step s is a pure function of (seed, s, i); the evaluation set is a
// fixed list drawn from a separate stream.
#pragma once
#include "core/config_enums.h"  // SyntheticTask
#include "data/pairs/seq2seq_source.h"

namespace loom {

struct SyntheticOptions {
  SyntheticTask task = SyntheticTask::kReverse;  // kReverse or kCopy
  int64_t vocab = 32;
  int64_t min_len = 1;
  int64_t max_len = 16;
  int64_t valid_size = 512;
  int64_t batch_size = 64;  // pairs per training step
  uint64_t seed = 0;
};

class SyntheticPairs : public Seq2SeqSource {
 public:
  explicit SyntheticPairs(const SyntheticOptions& options);
  Seq2SeqBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  int64_t train_batch_size(int64_t) const override { return options_.batch_size; }
  Seq2SeqBatch eval_batch(int64_t first, int64_t count) const override;
  int64_t eval_size() const override { return options_.valid_size; }
  int64_t vocab_size() const override { return options_.vocab; }

  TokenPair pair(uint64_t stream, int64_t index) const;  // pair `index` of a stream (a step, or the eval set)

 private:
  SyntheticOptions options_;
};

}  // namespace loom
