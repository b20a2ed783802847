#include "data/pairs/pair_source.h"

#include <algorithm>

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

PairFileSource::PairFileSource(std::vector<TrainPairs> train, std::unique_ptr<PairFile> valid,
                               PairSamplerOptions options, int64_t max_len)
    : train_(std::move(train)), valid_(std::move(valid)) {
  LOOM_CHECK(!train_.empty() || valid_, "a pair source needs a training or an evaluation file");
  std::vector<double> weights;
  for (const auto& t : train_) {
    check_lengths(*t.file, max_len);
    samplers_.push_back(std::make_unique<PairSampler>(*t.file, options));
    weights.push_back(t.weight);
  }
  if (valid_) check_lengths(*valid_, max_len);
  if (train_.size() > 1) {
    draws_ = std::make_unique<WeylMixture>(weights, options.seed);
    uses_.assign(train_.size(), 0);
  }
}

std::pair<size_t, int64_t> PairFileSource::file_step(int64_t step) const {
  LOOM_CHECK(!train_.empty(), "no training pairs (data.train)");
  LOOM_CHECK(step >= 0, "PairFileSource: step ", step, " < 0");
  if (!draws_) return {0, step};
  if (step < counted_) {  // an earlier step than the last one asked: count again from the start
    counted_ = 0;
    uses_.assign(train_.size(), 0);
  }
  for (; counted_ < step; ++counted_) ++uses_[draws_->source_of(static_cast<uint64_t>(counted_))];
  const size_t file = draws_->source_of(static_cast<uint64_t>(step));
  return {file, uses_[file]};
}

Seq2SeqBatch PairFileSource::train_batch(int64_t step, int64_t first, int64_t count) const {
  const auto [file, at] = file_step(step);
  return samplers_[file]->train_batch(at, first, count);
}

int64_t PairFileSource::train_batch_size(int64_t step) const {
  const auto [file, at] = file_step(step);
  return static_cast<int64_t>(samplers_[file]->train_pairs(at).size());
}

Seq2SeqBatch PairFileSource::eval_batch(int64_t first, int64_t count) const {
  LOOM_CHECK(valid_ != nullptr, "no evaluation pairs (data.valid)");
  std::vector<int64_t> pairs;
  for (int64_t i = first; i < first + count; ++i) pairs.push_back(i % eval_size());
  return make_pair_batch(*valid_, pairs);
}

int64_t PairFileSource::vocab_size() const {
  int64_t vocab = valid_ ? valid_->vocab_size() : 0;
  for (const auto& t : train_) vocab = std::max(vocab, t.file->vocab_size());
  return vocab;
}

std::vector<std::string> PairFileSource::source_names() const {
  std::vector<std::string> names;
  if (train_.size() > 1)
    for (const auto& t : train_) names.push_back(t.name);
  return names;
}

std::vector<int64_t> PairFileSource::source_tokens(int64_t step) const {
  if (train_.size() <= 1) return {};
  // The tokens a pair batch counts (Seq2SeqBatch::tokens()): each target and its eos.
  const auto [file, at] = file_step(step);
  std::vector<int64_t> tokens(train_.size(), 0);
  for (const int64_t pair : samplers_[file]->train_pairs(at)) tokens[file] += train_[file].file->target_length(pair) + 1;
  return tokens;
}

}  // namespace loom
