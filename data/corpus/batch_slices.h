// How a global batch of `size` sequences (or pairs) is shared out: each DP rank takes a near-equal
// consecutive slice, and splits it into near-equal consecutive micro-batches. One rule for every task
// and for evaluation, so any layout sees the same sequences; with a size divisible by dp * micro-batches
// every slice has size / (dp * micro-batches) sequences.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace loom {

// [begin, end) of part `index` of `parts` near-equal consecutive parts of `size` items (the first
// size % parts parts one larger).
std::pair<int64_t, int64_t> slice_range(int64_t size, int64_t parts, int64_t index);

struct BatchSlice {
  int64_t first = 0;
  int64_t count = 0;
};

// The micro-batches of DP rank `dp_rank` (of `dp`), `accumulation` of them, in the global batch of `size`.
std::vector<BatchSlice> micro_batches(int64_t size, int64_t dp, int64_t dp_rank, int64_t accumulation);

}  // namespace loom
