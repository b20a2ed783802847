#include "data/pairs/pair_source.h"

#include "core/error.h"

namespace loom {

namespace {

void check_lengths(const PairFile& file, int64_t max_len) {
  for (int64_t p = 0; p < file.size(); ++p)
    if (file.source_length(p) > max_len || file.target_length(p) + 1 > max_len)
      throw ConfigError("model.max_seq_len: " + std::to_string(max_len) + " is shorter than pair " + std::to_string(p) +
                        " of " + file.path().string() + " (source " + std::to_string(file.source_length(p)) +
                        " tokens, target " + std::to_string(file.target_length(p)) +
                        " + eos): raise model.max_seq_len or drop the long pairs when preparing the data");
}

}  // namespace

PairFileSource::PairFileSource(std::unique_ptr<PairFile> train, std::unique_ptr<PairFile> valid,
                               PairSamplerOptions options, int64_t max_len)
    : train_(std::move(train)), valid_(std::move(valid)) {
  LOOM_CHECK(train_ || valid_, "a pair source needs a training or an evaluation file");
  for (const auto* file : {train_.get(), valid_.get()})
    if (file) check_lengths(*file, max_len);
  if (train_) sampler_ = std::make_unique<PairSampler>(*train_, options);
}

Seq2SeqBatch PairFileSource::train_batch(int64_t step, int64_t first, int64_t count) const {
  LOOM_CHECK(sampler_ != nullptr, "no training pairs (data.train)");
  return sampler_->train_batch(step, first, count);
}

int64_t PairFileSource::train_batch_size(int64_t step) const {
  LOOM_CHECK(sampler_ != nullptr, "no training pairs (data.train)");
  return static_cast<int64_t>(sampler_->train_pairs(step).size());
}

Seq2SeqBatch PairFileSource::eval_batch(int64_t first, int64_t count) const {
  LOOM_CHECK(valid_ != nullptr, "no evaluation pairs (data.valid)");
  std::vector<int64_t> pairs;
  for (int64_t i = first; i < first + count; ++i) pairs.push_back(i % eval_size());
  return make_pair_batch(*valid_, pairs);
}

int64_t PairFileSource::vocab_size() const { return (train_ ? *train_ : *valid_).vocab_size(); }

}  // namespace loom
