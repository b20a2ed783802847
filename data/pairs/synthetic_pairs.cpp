#include "data/pairs/synthetic_pairs.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "data/corpus/splitmix.h"

namespace loom {
namespace {

constexpr uint64_t kEvalStream = 0xE7A15E7ull;  // training streams are the steps 0, 1, 2, ...
constexpr int64_t kFirstToken = 3;              // 0 unk/padding, 1 bos, 2 eos

}  // namespace

SyntheticPairs::SyntheticPairs(const SyntheticOptions& options) : options_(options) {
  LOOM_CHECK(options.task == SyntheticTask::kReverse || options.task == SyntheticTask::kCopy,
             "synthetic pairs are reverse or copy, not '", enum_name(options.task), "'");
  LOOM_CHECK(options.vocab > kFirstToken && options.min_len >= 1 && options.max_len >= options.min_len,
             "synthetic pairs need vocab > 3 and 1 <= min_len <= max_len");
}

TokenPair SyntheticPairs::pair(uint64_t stream, int64_t index) const {
  // mt19937_64 and plain modulo arithmetic (not std:: distributions, whose results differ between
  // standard libraries) keep the data identical everywhere.
  std::mt19937_64 random(splitmix64(splitmix64(splitmix64(options_.seed) ^ stream) ^ static_cast<uint64_t>(index)));
  const auto span = static_cast<uint64_t>(options_.max_len - options_.min_len + 1);
  const int64_t length = options_.min_len + static_cast<int64_t>(random() % span);
  std::vector<int64_t> source(length);
  for (auto& token : source)
    token = kFirstToken + static_cast<int64_t>(random() % static_cast<uint64_t>(options_.vocab - kFirstToken));
  std::vector<int64_t> target = source;
  if (options_.task == SyntheticTask::kReverse) std::reverse(target.begin(), target.end());
  return {source, target};
}

Seq2SeqBatch SyntheticPairs::train_batch(int64_t step, int64_t first, int64_t count) const {
  std::vector<TokenPair> pairs;
  for (int64_t i = first; i < first + count; ++i) pairs.push_back(pair(static_cast<uint64_t>(step), i));
  return collate_pairs(pairs);
}

Seq2SeqBatch SyntheticPairs::eval_batch(int64_t first, int64_t count) const {
  std::vector<TokenPair> pairs;
  for (int64_t i = first; i < first + count; ++i) pairs.push_back(pair(kEvalStream, i % options_.valid_size));
  return collate_pairs(pairs);
}

}  // namespace loom
