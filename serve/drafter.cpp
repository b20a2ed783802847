#include "serve/drafter.h"

#include "core/error.h"

namespace loom {

NgramDrafter::NgramDrafter(int64_t ngram_max, int64_t ngram_min) : ngram_max_(ngram_max), ngram_min_(ngram_min) {
  LOOM_CHECK(ngram_min_ >= 1 && ngram_max_ >= ngram_min_, "n-gram drafting needs 1 <= ngram_min <= ngram_max, got ",
             ngram_min_, " and ", ngram_max_);
}

std::vector<int64_t> NgramDrafter::lookup(const std::vector<int64_t>& tokens, int64_t k) const {
  const int64_t size = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min(ngram_max_, size - 1); n >= ngram_min_; --n) {
    // The latest start s < size - n whose n tokens equal the last n.
    for (int64_t s = size - n - 1; s >= 0; --s) {
      if (!std::equal(tokens.begin() + s, tokens.begin() + s + n, tokens.end() - n)) continue;
      const int64_t from = s + n, to = std::min(size, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

std::vector<Draft> NgramDrafter::propose(const std::vector<DraftRow>& rows, int64_t k) {
  std::vector<Draft> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    if (k > 0) out[i].tokens = lookup(*rows[i].tokens, k);
  return out;
}

}  // namespace loom
