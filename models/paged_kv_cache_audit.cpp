// KVBlockPool's block accounting (models/paged_kv_cache.h): a sliding window's past given back while its
// sequence runs (release_before), and audit(), which checks the reference counts, the free and evictable lists
// and the prefix cache's index against the live sequences' tables (the engine's churn tests call it).
#include <algorithm>
#include <map>
#include <sstream>

#include "models/paged_kv_cache.h"

namespace loom {

void KVBlockPool::release_before(BlockTable& table, int64_t position) {
  const int64_t whole = std::min<int64_t>(position / block_size_, static_cast<int64_t>(table.blocks.size()));
  for (int64_t i = whole - 1; i >= 0; --i) {  // the deeper blocks first, as release() does
    int64_t& b = table.blocks[static_cast<size_t>(i)];
    if (b == kNoBlock) break;  // the ones before were freed earlier
    if (--refs_[static_cast<size_t>(b)] == 0) {
      if (published_[static_cast<size_t>(b)].filed)
        evictable_at_[static_cast<size_t>(b)] = evictable_.insert(evictable_.end(), b);
      else
        free_.push_back(b);
    }
    b = kNoBlock;
  }
}

std::string KVBlockPool::audit(const std::vector<const BlockTable*>& tables) const {
  std::ostringstream out;
  std::vector<int64_t> held(static_cast<size_t>(blocks_), 0);
  for (const auto* table : tables) {
    if (table->length > static_cast<int64_t>(table->blocks.size()) * block_size_)
      out << "a table of " << table->blocks.size() << " blocks claims " << table->length << " positions; ";
    for (const int64_t b : table->blocks) {
      if (b == kNoBlock) continue;
      if (b < 0 || b >= blocks_) {
        out << "a table holds block " << b << " of " << blocks_ << "; ";
        continue;
      }
      ++held[static_cast<size_t>(b)];
    }
  }
  std::vector<int> places(static_cast<size_t>(blocks_), 0);  // in how many of free, evictable, referenced
  for (const int64_t b : free_) {
    ++places[static_cast<size_t>(b)];
    if (published_[static_cast<size_t>(b)].filed) out << "free block " << b << " is still filed; ";
  }
  for (const int64_t b : evictable_) {
    ++places[static_cast<size_t>(b)];
    if (!published_[static_cast<size_t>(b)].filed) out << "evictable block " << b << " is not filed; ";
    if (refs_[static_cast<size_t>(b)] != 0) out << "evictable block " << b << " is referenced; ";
  }
  for (int64_t b = 0; b < blocks_; ++b) {
    const auto i = static_cast<size_t>(b);
    if (refs_[i] != held[i])
      out << "block " << b << " has " << refs_[i] << " references but " << held[i] << " tables hold it; ";
    if (refs_[i] > 0) ++places[i];
    if (places[i] != 1) out << "block " << b << " is in " << places[i] << " of free/evictable/referenced; ";
    if (published_[i].filed) {
      const auto found = by_key_.find(published_[i].key);
      if (found == by_key_.end() || found->second != b) out << "filed block " << b << " is not indexed; ";
    }
  }
  for (const auto& [key, b] : by_key_)
    if (b < 0 || b >= blocks_ || !published_[static_cast<size_t>(b)].filed ||
        published_[static_cast<size_t>(b)].key != key)
      out << "the prefix index names block " << b << " that is not filed under its key; ";
  return out.str();
}

}  // namespace loom
