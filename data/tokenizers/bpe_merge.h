// The byte-pair merge shared by the tiktoken and Hugging Face tokenizers: a piece split into symbols
// (bytes or characters) is merged pair by pair, the pair of lowest rank first and the leftmost among
// equal ranks, until no adjacent pair has a rank. Short pieces (nearly all) rescan a small array; long
// ones (runs of spaces or digits) use a heap, so a piece of n symbols costs O(n log n), not O(n^2).
// Also the per-thread cache of whole pieces -> ids that makes repeated words cost one lookup.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <queue>
#include <string_view>
#include <vector>

#include "data/tokenizers/string_table.h"

namespace loom {

struct BpeSymbol {
  uint32_t start, end;  // bytes of the piece it covers
  int32_t id;
};

namespace detail {

template <class Lookup>
void bpe_merge_scan(std::vector<BpeSymbol>& symbols, Lookup& lookup) {
  thread_local std::vector<PairTable::Merge> pairs;
  pairs.resize(symbols.size() - 1);
  for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[i] = lookup(symbols[i], symbols[i + 1]);
  while (symbols.size() > 1) {
    size_t best = SIZE_MAX;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i < pairs.size(); ++i)
      if (pairs[i].rank >= 0 && pairs[i].rank < best_rank) best_rank = pairs[i].rank, best = i;
    if (best == SIZE_MAX) break;
    symbols[best] = {symbols[best].start, symbols[best + 1].end, pairs[best].id};
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) pairs[best - 1] = lookup(symbols[best - 1], symbols[best]);
    if (best < pairs.size()) pairs[best] = lookup(symbols[best], symbols[best + 1]);
  }
}

template <class Lookup>
void bpe_merge_heap(std::vector<BpeSymbol>& symbols, Lookup& lookup) {
  const size_t n = symbols.size();
  std::vector<uint32_t> next(n), prev(n), version(n, 0);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) next[i] = static_cast<uint32_t>(i + 1), prev[i] = static_cast<uint32_t>(i - 1);
  struct Entry {
    int32_t rank;
    uint32_t left, right, left_version, right_version;
    int32_t id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](uint32_t left, uint32_t right) {
    const PairTable::Merge m = lookup(symbols[left], symbols[right]);
    if (m.rank >= 0) heap.push({m.rank, left, right, version[left], version[right], m.id});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    if (!alive[e.left] || !alive[e.right] || next[e.left] != e.right || version[e.left] != e.left_version ||
        version[e.right] != e.right_version)
      continue;  // stale: one side has merged since
    symbols[e.left] = {symbols[e.left].start, symbols[e.right].end, e.id};
    ++version[e.left];
    alive[e.right] = false;
    next[e.left] = next[e.right];
    if (next[e.left] < n) prev[next[e.left]] = e.left;
    if (e.left > 0 && prev[e.left] < n) push(prev[e.left], e.left);
    if (next[e.left] < n) push(e.left, next[e.left]);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

}  // namespace detail

// lookup(left, right) -> PairTable::Merge: the rank of merging two adjacent symbols (-1: none) and the
// merged symbol's id.
template <class Lookup>
void bpe_merge(std::vector<BpeSymbol>& symbols, Lookup&& lookup) {
  if (symbols.size() < 2) return;
  if (symbols.size() <= 64) {
    detail::bpe_merge_scan(symbols, lookup);
  } else {
    detail::bpe_merge_heap(symbols, lookup);
  }
}

// Pieces -> ids already computed by one tokenizer on this thread (a tokenizer's encode stays const and
// thread-safe). Bounded: it starts over when full.
class PieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 256;

  static PieceCache& for_this_thread();

  // Appends the cached ids of `piece` to `out`; false when not cached.
  bool find(uint64_t owner, std::string_view piece, std::vector<int32_t>& out) const;
  void insert(uint64_t owner, std::string_view piece, const int32_t* ids, size_t count);

 private:
  void reset(uint64_t owner);

  uint64_t owner_ = 0;
  StringTable index_;  // piece -> entry
  std::vector<uint32_t> offsets_;  // entry -> first id in ids_ (entry + 1: its end)
  std::vector<int32_t> ids_;
};

// A process-wide unique number for each tokenizer, the owner of its cache entries.
uint64_t next_tokenizer_instance();

}  // namespace loom
