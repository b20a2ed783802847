#include "data/pairs/pair_sampler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "data/pairs/seq2seq_source.h"
#include "data/corpus/splitmix.h"

namespace loom {
namespace {

// Fisher-Yates over [begin, end) driven by a counter-based stream keyed by `key`: std::shuffle's
// algorithm is up to the standard library, this one is fixed.
void shuffle(std::vector<int64_t>& v, int64_t begin, int64_t end, uint64_t key) {
  uint64_t counter = 0;
  for (int64_t i = end - begin - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64(key ^ splitmix64(counter++)) % static_cast<uint64_t>(i + 1));
    std::swap(v[begin + i], v[begin + j]);
  }
}

constexpr uint64_t kRunsTag = 0x52554E53ull;     // "RUNS": which equal-length pairs share a batch
constexpr uint64_t kBatchesTag = 0x42415443ull;  // "BATC": the order of the batches

// The file's pair indices by (target length, source length, index): shortest first, ties in file order.
std::vector<int64_t> pairs_by_length(const PairFile& file) {
  std::vector<int64_t> order(file.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int64_t p) { return std::make_pair(file.target_length(p), file.source_length(p)); };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  return order;
}

}  // namespace

PairSampler::PairSampler(const PairFile& file, PairSamplerOptions options) : file_(file), options_(options) {
  if (options_.batch_tokens <= 0)
    throw ConfigError("train.batch_tokens: " + std::to_string(options_.batch_tokens) + " must be > 0");
  if (options_.min_pairs < 1 || options_.min_pairs > file_.size())
    throw ConfigError(file_.path().string() + ": batches of at least " + std::to_string(options_.min_pairs) +
                      " pairs (parallel.dp * micro-batches) need that many pairs; the file has " +
                      std::to_string(file_.size()));
  const int64_t n = file_.size();
  sorted_ = pairs_by_length(file_);
  auto key = [&](int64_t p) { return std::make_pair(file_.target_length(p), file_.source_length(p)); };
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || key(sorted_[i]) != key(sorted_[i - 1])) runs_.push_back(i);
  runs_.push_back(n);

  // Greedy cut: add pairs while the padded batch fits, but never close one with fewer than min_pairs.
  bounds_.push_back(0);
  int64_t count = 0, longest_source = 0, longest_target = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = file_.source_length(sorted_[i]), t = file_.target_length(sorted_[i]) + 1;
    const int64_t padded = (count + 1) * (std::max(longest_source, s) + std::max(longest_target, t));
    if (count >= options_.min_pairs && padded > options_.batch_tokens) {
      bounds_.push_back(i);
      count = 0, longest_source = 0, longest_target = 0;
    }
    ++count, longest_source = std::max(longest_source, s), longest_target = std::max(longest_target, t);
  }
  if (count < options_.min_pairs && bounds_.size() > 1) bounds_.pop_back();  // a short tail joins the batch before
  bounds_.push_back(n);
}

const std::vector<int64_t>& PairSampler::epoch_order(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_order_ = sorted_;
    const uint64_t key = splitmix64(splitmix64(options_.seed ^ kRunsTag) ^ static_cast<uint64_t>(epoch));
    for (size_t r = 0; r + 1 < runs_.size(); ++r) shuffle(cached_order_, runs_[r], runs_[r + 1], splitmix64(key ^ r));
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

std::vector<int64_t> PairSampler::batch_order(int64_t epoch) const {
  std::vector<int64_t> order(batches_per_epoch());
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, 0, batches_per_epoch(), splitmix64(splitmix64(options_.seed ^ kBatchesTag) ^ static_cast<uint64_t>(epoch)));
  return order;
}

std::vector<int64_t> PairSampler::train_pairs(int64_t step) const {
  LOOM_CHECK(step >= 0, "PairSampler: step ", step, " < 0");
  const int64_t epoch = step / batches_per_epoch();
  const int64_t batch = batch_order(epoch)[step % batches_per_epoch()];
  const auto& order = epoch_order(epoch);
  return {order.begin() + bounds_[batch], order.begin() + bounds_[batch + 1]};
}

Seq2SeqBatch PairSampler::train_batch(int64_t step, int64_t first, int64_t count) const {
  const auto pairs = train_pairs(step);
  LOOM_CHECK(first >= 0 && count >= 0 && first + count <= static_cast<int64_t>(pairs.size()), "pairs [", first, ", ",
             first + count, ") outside the ", pairs.size(), " pairs of step ", step, "'s batch");
  return make_pair_batch(file_, {pairs.begin() + first, pairs.begin() + first + count});
}

std::vector<int64_t> PairSampler::eval_pairs(int64_t batch) const {
  LOOM_CHECK(batch >= 0 && batch < eval_batches(), "evaluation batch ", batch, " outside [0, ", eval_batches(), ")");
  return {sorted_.begin() + bounds_[batch], sorted_.begin() + bounds_[batch + 1]};
}

Seq2SeqBatch make_pair_batch(const PairFile& file, const std::vector<int64_t>& pairs) {
  std::vector<TokenPair> tokens;
  tokens.reserve(pairs.size());
  for (int64_t p : pairs) {
    const auto source = file.source(p), target = file.target(p);
    const int64_t* s = source.data_ptr<int64_t>();
    const int64_t* t = target.data_ptr<int64_t>();
    tokens.emplace_back(std::vector<int64_t>(s, s + source.numel()), std::vector<int64_t>(t, t + target.numel()));
  }
  return collate_pairs(tokens);
}

}  // namespace loom
