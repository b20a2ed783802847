#include "data/corpus/lm_mixture.h"

#include "core/error.h"

namespace loom {

namespace {

std::vector<double> weights_of(const std::vector<LmSource>& sources) {
  std::vector<double> weights;
  for (const auto& s : sources) weights.push_back(s.weight);
  return weights;
}

}  // namespace

LmMixture::LmMixture(std::vector<LmSource> sources, LmSampler sampler, int64_t batch_size)
    : sources_(std::move(sources)), sampler_(sampler), batch_size_(batch_size),
      draws_(weights_of(sources_), sampler.seed()) {
  for (const auto& s : sources_) s.corpus->window_starts(sampler_.seq_len());  // each one fits seq_len (or throws)
}

size_t LmMixture::source_of(int64_t step, int64_t index) const {
  return draws_.source_of(static_cast<uint64_t>(step) * static_cast<uint64_t>(batch_size_) + static_cast<uint64_t>(index));
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
