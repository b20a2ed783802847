#include "data/tokenizers/bpe_merge.h"

#include <atomic>

namespace loom {
namespace {
constexpr size_t kMaxEntries = 1 << 18;
constexpr size_t kMaxIds = 1 << 22;
}  // namespace

PieceCache& PieceCache::for_this_thread() {
  thread_local PieceCache cache;
  return cache;
}

bool PieceCache::find(uint64_t owner, std::string_view piece, std::vector<int32_t>& out) const {
  if (owner != owner_) return false;
  const int32_t entry = index_.find(piece);
  if (entry == StringTable::kMissing) return false;
  const auto e = static_cast<size_t>(entry);
  out.insert(out.end(), ids_.begin() + offsets_[e], ids_.begin() + offsets_[e + 1]);
  return true;
}

void PieceCache::insert(uint64_t owner, std::string_view piece, const int32_t* ids, size_t count) {
  if (piece.size() > kMaxPieceBytes) return;
  if (owner != owner_ || index_.size() >= kMaxEntries || ids_.size() + count > kMaxIds) reset(owner);
  index_.insert(piece, static_cast<int32_t>(offsets_.size() - 1));
  ids_.insert(ids_.end(), ids, ids + count);
  offsets_.push_back(static_cast<uint32_t>(ids_.size()));
}

void PieceCache::reset(uint64_t owner) {
  owner_ = owner;
  index_.clear();
  ids_.clear();
  offsets_.assign(1, 0);
}

uint64_t next_tokenizer_instance() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace loom
