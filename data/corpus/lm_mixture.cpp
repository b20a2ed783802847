#include "data/corpus/lm_mixture.h"

#include "core/error.h"
#include "data/corpus/splitmix.h"

namespace loom {

LmMixture::LmMixture(std::vector<LmSource> sources, LmSampler sampler, int64_t batch_size)
    : sources_(std::move(sources)), sampler_(sampler), batch_size_(batch_size),
      offset_(splitmix64(sampler.seed() ^ 0x6d6978747572ull)) {  // "mixture"
  LOOM_CHECK(!sources_.empty(), "no training data sources");
  double total = 0;
  for (const auto& s : sources_) {
    LOOM_CHECK(s.weight > 0, s.name, ": a source's weight must be > 0");
    total += s.weight;
  }
  double sum = 0;
  for (const auto& s : sources_) cumulative_.push_back((sum += s.weight) / total);
  cumulative_.back() = 1.0;
  for (const auto& s : sources_) s.corpus->window_starts(sampler_.seq_len());  // each one fits seq_len (or throws)
}

size_t LmMixture::source_of(int64_t step, int64_t index) const {
  if (sources_.size() == 1) return 0;
  // In 64-bit fixed point: kSplitMixIncrement is 2^64 / phi, so x / 2^64 = frac(n / phi + offset).
  const uint64_t n = static_cast<uint64_t>(step) * static_cast<uint64_t>(batch_size_) + static_cast<uint64_t>(index);
  const uint64_t x = n * kSplitMixIncrement + offset_;
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
  size_t s = 0;
  while (u >= cumulative_[s]) ++s;
  return s;
}

LmBatch LmMixture::train_batch(int64_t step, int64_t first, int64_t count) const {
  std::vector<CorpusWindow> windows;
  for (int64_t i = first; i < first + count; ++i) {
    const TokenCorpus& corpus = *sources_[source_of(step, i)].corpus;
    windows.push_back(corpus.window(sampler_.window_start(corpus, step, i), sampler_.seq_len()));
  }
  return sampler_.batch_of(windows);
}

std::vector<std::string> LmMixture::source_names() const {
  std::vector<std::string> names;
  if (sources_.size() > 1)
    for (const auto& s : sources_) names.push_back(s.name);
  return names;
}

std::vector<int64_t> LmMixture::source_tokens(int64_t step) const {
  if (sources_.size() == 1) return {};
  std::vector<int64_t> tokens(sources_.size(), 0);
  for (int64_t i = 0; i < batch_size_; ++i) tokens[source_of(step, i)] += sampler_.seq_len();
  return tokens;
}

}  // namespace loom
