#include "data/corpus/weyl_mixture.h"

#include "core/error.h"
#include "data/corpus/splitmix.h"

namespace loom {

WeylMixture::WeylMixture(const std::vector<double>& weights, uint64_t seed)
    : offset_(splitmix64(seed ^ 0x6d6978747572ull)) {  // "mixture"
  LOOM_CHECK(!weights.empty(), "no training data sources");
  double total = 0;
  for (const double w : weights) {
    LOOM_CHECK(w > 0, "a source's weight must be > 0, not ", w);
    total += w;
  }
  double sum = 0;
  for (const double w : weights) cumulative_.push_back((sum += w) / total);
  cumulative_.back() = 1.0;
}

size_t WeylMixture::source_of(uint64_t n) const {
  if (cumulative_.size() == 1) return 0;
  // In 64-bit fixed point: kSplitMixIncrement is 2^64 / phi, so x / 2^64 = frac(n / phi + offset).
  const uint64_t x = n * kSplitMixIncrement + offset_;
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
  size_t s = 0;
  while (u >= cumulative_[s]) ++s;
  return s;
}

}  // namespace loom
