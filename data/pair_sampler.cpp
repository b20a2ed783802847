#include "data/pair_sampler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "data/splitmix.h"

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

}  // namespace

PairSampler::PairSampler(const PairFile& file, PairSamplerOptions options) : file_(file), options_(options) {
  if (options_.batch_tokens <= 0)
    throw ConfigError("train.batch_tokens: " + std::to_string(options_.batch_tokens) + " must be > 0");
  if (options_.min_pairs < 1 || options_.min_pairs > file_.size())
    throw ConfigError(file_.path().string() + ": batches of at least " + std::to_string(options_.min_pairs) +
                      " pairs (parallel.dp * micro-batches) need that many pairs; the file has " +
                      std::to_string(file_.size()));
  const int64_t n = file_.size();
  sorted_.resize(n);
  std::iota(sorted_.begin(), sorted_.end(), 0);
  auto key = [&](int64_t p) { return std::make_pair(file_.target_length(p), file_.source_length(p)); };
  std::stable_sort(sorted_.begin(), sorted_.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
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
  return make_batch({pairs.begin() + first, pairs.begin() + first + count});
}

std::vector<int64_t> PairSampler::eval_pairs(int64_t batch) const {
  LOOM_CHECK(batch >= 0 && batch < eval_batches(), "evaluation batch ", batch, " outside [0, ", eval_batches(), ")");
  return {sorted_.begin() + bounds_[batch], sorted_.begin() + bounds_[batch + 1]};
}

Seq2SeqBatch PairSampler::make_batch(const std::vector<int64_t>& pairs) const {
  const auto b = static_cast<int64_t>(pairs.size());
  int64_t longest_source = 0, longest_target = 0;
  for (int64_t p : pairs) {
    longest_source = std::max(longest_source, file_.source_length(p));
    longest_target = std::max(longest_target, file_.target_length(p) + 1);
  }
  Seq2SeqBatch out;
  out.source = torch::zeros({b, longest_source}, torch::kLong);  // 0 (unk) pads; lengths say where
  out.target_inputs = torch::zeros({b, longest_target}, torch::kLong);
  out.target_labels = torch::full({b, longest_target}, kIgnoreLabel, torch::kLong);
  out.source_lengths = torch::empty({b}, torch::kLong);
  out.target_lengths = torch::empty({b}, torch::kLong);
  // Filled through raw pointers: per-element tensor indexing would cost more than the copy.
  auto* source = out.source.data_ptr<int64_t>();
  auto* inputs = out.target_inputs.data_ptr<int64_t>();
  auto* labels = out.target_labels.data_ptr<int64_t>();
  auto* source_lengths = out.source_lengths.data_ptr<int64_t>();
  auto* target_lengths = out.target_lengths.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const auto src = file_.source(pairs[i]), tgt = file_.target(pairs[i]);
    const int64_t s = src.size(0), t = tgt.size(0);
    const auto* src_ids = src.data_ptr<int64_t>();
    const auto* tgt_ids = tgt.data_ptr<int64_t>();
    std::copy(src_ids, src_ids + s, source + i * longest_source);
    inputs[i * longest_target] = kBosId;
    std::copy(tgt_ids, tgt_ids + t, inputs + i * longest_target + 1);
    std::copy(tgt_ids, tgt_ids + t, labels + i * longest_target);
    labels[i * longest_target + t] = kEosId;
    source_lengths[i] = s;
    target_lengths[i] = t + 1;
  }
  return out;
}

std::pair<int64_t, int64_t> slice_range(int64_t size, int64_t parts, int64_t index) {
  LOOM_CHECK(parts > 0 && index >= 0 && index < parts, "slice ", index, " of ", parts, " parts");
  const int64_t base = size / parts, extra = size % parts;
  const int64_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace loom
