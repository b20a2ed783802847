// Which of several weighted sources draw n comes from, a pure function of (seed, n): the golden-ratio
// (Weyl) sequence u_n = frac(n * phi^-1 + offset(seed)) falls among the cumulative weights. The sequence
// fills [0, 1) evenly, so any N consecutive draws take each source's share to within a few / N of its
// weight (an independent draw each would be off by ~1/sqrt(N)). data.train's mixtures draw so: LM windows
// one per sequence (lm_mixture.h), translation pair batches one per step (data/pairs/pair_source.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom {

class WeylMixture {
 public:
  // weights: each > 0 (loom::Error otherwise), at least one.
  WeylMixture(const std::vector<double>& weights, uint64_t seed);
  size_t source_of(uint64_t n) const;
  size_t size() const { return cumulative_.size(); }

 private:
  std::vector<double> cumulative_;  // normalized weights summed up to each source; the last is 1
  uint64_t offset_;                 // the sequence's start, from the seed
};

}  // namespace loom
