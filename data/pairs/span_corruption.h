// T5's span corruption (Raffel et al. 2020, section 3.1.4; t5.data.preprocessors.span_corruption): a window of
// L tokens becomes a (source, target) pair for the encoder-decoder. round(L x noise_density) of its tokens
// (at least 1, at most L - 1) are noise, in round(noise / mean_noise_span) spans (at least 1); the noise and
// the other tokens are each cut into that many non-empty runs at uniformly random places, and the window is
// non-noise run 0, noise span 0, non-noise run 1, noise span 1, ... The source replaces noise span k by
// sentinel k, the target is sentinel k followed by span k, for every k (loom's pair batches add the eos).
// Sentinel k is id vocab_size - 1 - k (T5's <extra_id_k>). Every choice is a pure function of (seed, step,
// window index) (data/corpus/splitmix.h), so a resume or another DP size gives the same pairs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/corpus/lm_batches.h"
#include "data/corpus/lm_sampler.h"
#include "data/corpus/token_corpus.h"
#include "data/pairs/seq2seq_source.h"

namespace loom {

struct SpanCorruptionOptions {
  double noise_density = 0.15;
  double mean_noise_span = 3.0;
  int64_t vocab_size = 0;  // sentinels count down from vocab_size - 1
  uint64_t seed = 0;
};

// The noise spans of a window of `length` tokens: (L_noise, spans) as T5 rounds them.
std::pair<int64_t, int64_t> noise_tokens_and_spans(int64_t length, const SpanCorruptionOptions& options);

// The pair of window `tokens` for (step, index); step -1 is the evaluation set's.
TokenPair corrupt_spans(const std::vector<int64_t>& tokens, const SpanCorruptionOptions& options, int64_t step,
                        int64_t index);

// Pairs from token windows: training windows from `train` (train.batch_size of data.seq_len tokens a step,
// LmBatches' windows without their last token), evaluation windows the valid corpus's consecutive ones.
class SpanCorruptionSource : public Seq2SeqSource {
 public:
  SpanCorruptionSource(std::unique_ptr<LmBatches> train, std::unique_ptr<TokenCorpus> valid, int64_t seq_len,
                       int64_t batch_size, const SpanCorruptionOptions& options);
  Seq2SeqBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  int64_t train_batch_size(int64_t) const override { return batch_size_; }
  Seq2SeqBatch eval_batch(int64_t first, int64_t count) const override;
  int64_t eval_size() const override { return valid_ ? valid_->eval_windows(seq_len_) : 0; }
  int64_t vocab_size() const override { return options_.vocab_size; }
  std::vector<std::string> source_names() const override { return train_ ? train_->source_names() : std::vector<std::string>{}; }
  std::vector<int64_t> source_tokens(int64_t step) const override {
    return train_ ? train_->source_tokens(step) : std::vector<int64_t>{};
  }

 private:
  Seq2SeqBatch pairs_of(const LmBatch& windows, int64_t step, int64_t first) const;

  std::unique_ptr<LmBatches> train_;
  std::unique_ptr<TokenCorpus> valid_;
  int64_t seq_len_, batch_size_;
  SpanCorruptionOptions options_;
};

}  // namespace loom
