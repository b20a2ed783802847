// KVBlockPool's prefix caching (models/paged_kv_cache.h): blocks filed by the hash of their tokens chained with
// their predecessors', shared by reference counts, kept when released until a reservation evicts them.
#include "models/paged_kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace loom {
namespace {

constexpr uint64_t kPrefixRoot = 0x6c6f6f6d70726566ull;  // the chain's start

// The key of a block: its parent's key and its tokens, mixed (splitmix64 steps); hits are checked token by token.
uint64_t prefix_block_key(uint64_t parent, const int64_t* tokens, int64_t n) {
  uint64_t h = parent;
  for (int64_t i = 0; i < n; ++i) {
    h ^= static_cast<uint64_t>(tokens[i]) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
  }
  return h;
}

}  // namespace

int64_t KVBlockPool::take_block() {
  int64_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    LOOM_CHECK(!evictable_.empty(), "the KV block pool is out of blocks");
    b = evictable_.front();  // evicted: its prefix is forgotten
    evictable_.pop_front();
    evictable_at_[static_cast<size_t>(b)] = evictable_.end();
    auto& p = published_[static_cast<size_t>(b)];
    by_key_.erase(p.key);
    p = Published{};
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

int64_t KVBlockPool::share_prefix(BlockTable& table, const std::vector<int64_t>& tokens, int64_t max_positions) {
  if (!prefix_caching_ || !table.blocks.empty()) return 0;
  uint64_t parent = kPrefixRoot;
  const int64_t n = std::min<int64_t>(max_positions, static_cast<int64_t>(tokens.size())) / block_size_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* block_tokens = tokens.data() + i * block_size_;
    const uint64_t key = prefix_block_key(parent, block_tokens, block_size_);
    const auto found = by_key_.find(key);
    if (found == by_key_.end()) break;
    const int64_t b = found->second;
    const auto& p = published_[static_cast<size_t>(b)];
    if (p.parent != parent || !std::equal(p.tokens.begin(), p.tokens.end(), block_tokens)) break;  // a collision
    if (refs_[static_cast<size_t>(b)]++ == 0) {
      evictable_.erase(evictable_at_[static_cast<size_t>(b)]);
      evictable_at_[static_cast<size_t>(b)] = evictable_.end();
    }
    table.blocks.push_back(b);
    parent = key;
  }
  table.length = static_cast<int64_t>(table.blocks.size()) * block_size_;
  return table.length;
}

void KVBlockPool::publish(const BlockTable& table, const std::vector<int64_t>& tokens) {
  if (!prefix_caching_) return;
  const int64_t full = std::min<int64_t>(table.length, static_cast<int64_t>(tokens.size())) / block_size_;
  uint64_t parent = kPrefixRoot;
  for (int64_t i = 0; i < full; ++i) {
    const int64_t b = table.blocks[static_cast<size_t>(i)];
    if (b == kNoBlock) {  // freed by a sliding window: not filed, the chain goes on through its tokens
      parent = prefix_block_key(parent, tokens.data() + i * block_size_, block_size_);
      continue;
    }
    auto& p = published_[static_cast<size_t>(b)];
    if (p.filed && p.parent == parent) {  // filed before (by this sequence or the one it shares it with)
      parent = p.key;
      continue;
    }
    const int64_t* block_tokens = tokens.data() + i * block_size_;
    const uint64_t key = prefix_block_key(parent, block_tokens, block_size_);
    if (!p.filed && !by_key_.count(key)) {
      p.filed = true;
      p.key = key;
      p.parent = parent;
      p.tokens.assign(block_tokens, block_tokens + block_size_);
      by_key_[key] = b;
    }
    parent = key;  // a block holding a prefix filed elsewhere stays private; its successors chain on
  }
}

}  // namespace loom
