#include "data/pairs/span_corruption.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/corpus/splitmix.h"

namespace loom {
namespace {

// A stream of 64-bit draws keyed by (seed, step, index).
class SpanStream {
 public:
  SpanStream(uint64_t seed, int64_t step, int64_t index)
      : state_(splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index))) {}
  uint64_t next() { return splitmix64(state_ += kSplitMixIncrement); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

// n items cut into k non-empty runs at k - 1 of the n - 1 gaps, chosen uniformly (a partial Fisher-Yates
// shuffle of the gaps) -> the k run lengths.
std::vector<int64_t> random_segmentation(int64_t n, int64_t k, SpanStream& stream) {
  std::vector<int64_t> gaps(static_cast<size_t>(n - 1));
  for (int64_t i = 0; i < n - 1; ++i) gaps[static_cast<size_t>(i)] = i + 1;
  for (int64_t i = 0; i < k - 1; ++i)
    std::swap(gaps[static_cast<size_t>(i)], gaps[static_cast<size_t>(i + stream.below(n - 1 - i))]);
  std::vector<int64_t> cuts(gaps.begin(), gaps.begin() + (k - 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(n);
  std::vector<int64_t> lengths;
  int64_t previous = 0;
  for (const int64_t cut : cuts) {
    lengths.push_back(cut - previous);
    previous = cut;
  }
  return lengths;
}

}  // namespace

std::pair<int64_t, int64_t> noise_tokens_and_spans(int64_t length, const SpanCorruptionOptions& o) {
  const int64_t noise = std::min(std::max<int64_t>(std::llround(static_cast<double>(length) * o.noise_density), 1),
                                 length - 1);
  const int64_t spans = std::max<int64_t>(std::llround(static_cast<double>(noise) / o.mean_noise_span), 1);
  return {noise, std::min(spans, length - noise)};  // every span after a non-empty run of kept tokens
}

TokenPair corrupt_spans(const std::vector<int64_t>& tokens, const SpanCorruptionOptions& o, int64_t step,
                        int64_t index) {
  const auto length = static_cast<int64_t>(tokens.size());
  LOOM_CHECK(length >= 2, "span corruption needs windows of at least 2 tokens");
  const auto [noise, spans] = noise_tokens_and_spans(length, o);
  SpanStream stream(o.seed, step, index);
  const auto noise_lengths = random_segmentation(noise, spans, stream);
  const auto kept_lengths = random_segmentation(length - noise, spans, stream);
  TokenPair pair;
  int64_t at = 0;
  for (int64_t k = 0; k < spans; ++k) {
    const int64_t sentinel = o.vocab_size - 1 - k;
    for (int64_t i = 0; i < kept_lengths[static_cast<size_t>(k)]; ++i) pair.first.push_back(tokens[static_cast<size_t>(at++)]);
    pair.first.push_back(sentinel);
    pair.second.push_back(sentinel);
    for (int64_t i = 0; i < noise_lengths[static_cast<size_t>(k)]; ++i) pair.second.push_back(tokens[static_cast<size_t>(at++)]);
  }
  return pair;
}

SpanCorruptionSource::SpanCorruptionSource(std::unique_ptr<LmBatches> train, std::unique_ptr<TokenCorpus> valid,
                                           int64_t seq_len, int64_t batch_size, const SpanCorruptionOptions& options)
    : train_(std::move(train)), valid_(std::move(valid)), seq_len_(seq_len), batch_size_(batch_size), options_(options) {}

Seq2SeqBatch SpanCorruptionSource::pairs_of(const LmBatch& windows, int64_t step, int64_t first) const {
  const auto inputs = windows.inputs.to(torch::kLong).contiguous();
  const auto rows = inputs.accessor<int64_t, 2>();
  std::vector<TokenPair> pairs;
  for (int64_t b = 0; b < inputs.size(0); ++b) {
    std::vector<int64_t> tokens(static_cast<size_t>(inputs.size(1)));
    for (int64_t t = 0; t < inputs.size(1); ++t) tokens[static_cast<size_t>(t)] = rows[b][t];
    pairs.push_back(corrupt_spans(tokens, options_, step, first + b));
  }
  return collate_pairs(pairs);
}

Seq2SeqBatch SpanCorruptionSource::train_batch(int64_t step, int64_t first, int64_t count) const {
  LOOM_CHECK(train_ != nullptr, "span corruption: no training data");
  return pairs_of(train_->train_batch(step, first, count), step, first);
}

Seq2SeqBatch SpanCorruptionSource::eval_batch(int64_t first, int64_t count) const {
  LOOM_CHECK(valid_ != nullptr, "span corruption: no validation data");
  const auto inputs = LmSampler(options_.seed, seq_len_).eval_batch(*valid_, first, count).inputs.to(torch::kLong).contiguous();
  // The evaluation set's windows wrap around: window i's spans are those of i modulo the set's size.
  const int64_t size = std::max<int64_t>(1, eval_size());
  std::vector<TokenPair> pairs;
  for (int64_t b = 0; b < inputs.size(0); ++b) {
    const auto row = inputs[b];
    const std::vector<int64_t> tokens(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
    pairs.push_back(corrupt_spans(tokens, options_, -1, (first + b) % size));
  }
  return collate_pairs(pairs);
}

}  // namespace loom
