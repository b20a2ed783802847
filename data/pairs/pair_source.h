// Translation pairs from pair token files (data/pairs/pair_file.h, made by scripts/prepare_bible_mt.sh):
// training batches of train.batch_tokens padded tokens from the PairSampler, so the number of pairs
// varies from step to step; evaluation in file order, so translations line up with the text files.
#pragma once
#include <memory>

#include "data/pairs/pair_file.h"
#include "data/pairs/pair_sampler.h"
#include "data/pairs/seq2seq_source.h"

namespace loom {

class PairFileSource : public Seq2SeqSource {
 public:
  // train may be null (evaluation only), valid may be null (no evaluation); not both. Throws ConfigError
  // when a pair is longer than max_len (model.max_seq_len) on either side (the target with its eos).
  PairFileSource(std::unique_ptr<PairFile> train, std::unique_ptr<PairFile> valid, PairSamplerOptions options,
                 int64_t max_len);

  Seq2SeqBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  int64_t train_batch_size(int64_t step) const override;
  Seq2SeqBatch eval_batch(int64_t first, int64_t count) const override;
  int64_t eval_size() const override { return valid_ ? valid_->size() : 0; }
  int64_t vocab_size() const override;

 private:
  std::unique_ptr<PairFile> train_;
  std::unique_ptr<PairFile> valid_;
  std::unique_ptr<PairSampler> sampler_;  // over train_
};

}  // namespace loom
