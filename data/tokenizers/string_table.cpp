#include "data/tokenizers/string_table.h"

#include <cstring>

#include "core/error.h"

namespace loom {

uint64_t hash_bytes(std::string_view s) {
  // 8 bytes at a time, multiply-xorshift mixing: keys are short (tokens, pieces of words).
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
  const char* p = s.data();
  size_t n = s.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
  }
  return h * 0x9E3779B97F4A7C15ull ^ (h >> 31);
}

size_t StringTable::slot_of(std::string_view key, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.value == kMissing) return i;
    if (s.hash == hash && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
      return i;
  }
}

int32_t StringTable::find(std::string_view key) const {
  if (slots_.empty()) return kMissing;
  return slots_[slot_of(key, hash_bytes(key))].value;
}

void StringTable::insert(std::string_view key, int32_t value) {
  LOOM_CHECK(value != kMissing, "StringTable: value -1 is reserved");
  if ((count_ + 1) * 4 > slots_.size() * 3) grow();
  const uint64_t hash = hash_bytes(key);
  Slot& s = slots_[slot_of(key, hash)];
  if (s.value == kMissing) {
    LOOM_CHECK(arena_.size() + key.size() < (1ull << 32), "StringTable: more than 4 GB of keys");
    s.hash = hash;
    s.offset = static_cast<uint32_t>(arena_.size());
    s.length = static_cast<uint32_t>(key.size());
    arena_.append(key.data(), key.size());
    ++count_;
  }
  s.value = value;
}

void StringTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.value == kMissing) continue;
    size_t i = s.hash & mask;
    while (slots_[i].value != kMissing) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void StringTable::clear() {
  slots_.clear();
  arena_.clear();
  count_ = 0;
}

void PairTable::insert(int32_t left, int32_t right, Merge merge) {
  if ((count_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    count_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty) insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.merge);
  }
  const uint64_t key = pack(left, right);
  size_t i = mix(key) & (slots_.size() - 1);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & (slots_.size() - 1);
  if (slots_[i].key == kEmpty) ++count_;
  slots_[i] = Slot{key, merge};
}

}  // namespace loom
