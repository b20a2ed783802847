#include "data/corpus/batch_slices.h"

#include <algorithm>

#include "core/error.h"

namespace loom {

std::pair<int64_t, int64_t> slice_range(int64_t size, int64_t parts, int64_t index) {
  LOOM_CHECK(parts > 0 && index >= 0 && index < parts, "slice ", index, " of ", parts, " parts");
  const int64_t base = size / parts, extra = size % parts;
  const int64_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

std::vector<BatchSlice> micro_batches(int64_t size, int64_t dp, int64_t dp_rank, int64_t accumulation) {
  const auto [begin, end] = slice_range(size, dp, dp_rank);
  std::vector<BatchSlice> out;
  for (int64_t m = 0; m < accumulation; ++m) {
    const auto [first, last] = slice_range(end - begin, accumulation, m);
    out.push_back({begin + first, last - first});
  }
  return out;
}

}  // namespace loom
