// Translation pairs from pair token files (data/pairs/pair_file.h, made by scripts/prepare_bible_mt.sh):
// training batches of train.batch_tokens padded tokens from the PairSampler, so the number of pairs
// varies from step to step; evaluation in file order, so translations line up with the text files.
// Several training files (data.train: a list of {path, weight}) are a mixture by step: each step's whole
// batch comes from one file, the WeylMixture's draw for that step (data/corpus/weyl_mixture.h: over any N
// steps each file's share of the batches is within a few / N of its weight; every batch holds about
// train.batch_tokens padded tokens, so that is its share of the tokens too), and a file's k-th batch is its
// own sampler's step k, so every file keeps the sampler's epoch guarantee. Batches stay length-bucketed
// within one file.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/corpus/weyl_mixture.h"
#include "data/pairs/pair_file.h"
#include "data/pairs/pair_sampler.h"
#include "data/pairs/seq2seq_source.h"

namespace loom {

// A training pair file of data.train and its weight.
struct TrainPairs {
  std::string name;  // for metrics (the config's path)
  double weight = 1.0;
  std::unique_ptr<PairFile> file;
};

class PairFileSource : public Seq2SeqSource {
 public:
  // train may be empty (evaluation only), valid may be null (no evaluation); not both. Throws ConfigError
  // when a pair is longer than max_len (model.max_seq_len) on either side (the target with its eos).
  PairFileSource(std::vector<TrainPairs> train, std::unique_ptr<PairFile> valid, PairSamplerOptions options,
                 int64_t max_len);

  Seq2SeqBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  int64_t train_batch_size(int64_t step) const override;
  Seq2SeqBatch eval_batch(int64_t first, int64_t count) const override;
  int64_t eval_size() const override { return valid_ ? valid_->size() : 0; }
  int64_t vocab_size() const override;
  std::vector<std::string> source_names() const override;
  std::vector<int64_t> source_tokens(int64_t step) const override;

  // The training file step `step` draws from, and that file's sampler step: how many earlier steps drew it.
  std::pair<size_t, int64_t> file_step(int64_t step) const;

 private:
  std::vector<TrainPairs> train_;
  std::unique_ptr<PairFile> valid_;
  std::vector<std::unique_ptr<PairSampler>> samplers_;  // one per training file
  std::unique_ptr<WeylMixture> draws_;                  // several training files only
  // file_step's count so far (steps come in order): uses_[f] of the steps before counted_ drew file f.
  mutable int64_t counted_ = 0;
  mutable std::vector<int64_t> uses_;
};

}  // namespace loom
