// An open-addressing hash map from byte strings to int32 values, with the keys in one arena: lookups by
// string_view never allocate. The rank and vocabulary tables of the BPE tokenizers, and their piece
// caches, are these.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

uint64_t hash_bytes(std::string_view s);

class StringTable {
 public:
  static constexpr int32_t kMissing = -1;

  // Inserts or overwrites key -> value.
  void insert(std::string_view key, int32_t value);
  int32_t find(std::string_view key) const;
  size_t size() const { return count_; }
  size_t arena_bytes() const { return arena_.size(); }
  void clear();

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t value = kMissing;  // kMissing: an empty slot
  };
  void grow();
  size_t slot_of(std::string_view key, uint64_t hash) const;

  std::vector<Slot> slots_;
  std::string arena_;
  size_t count_ = 0;
};

// (id, id) -> (rank, merged id): the merges of a Hugging Face BPE model.
class PairTable {
 public:
  struct Merge {
    int32_t rank = -1;  // -1: no such merge
    int32_t id = -1;
  };
  void insert(int32_t left, int32_t right, Merge merge);
  Merge find(int32_t left, int32_t right) const {
    if (slots_.empty()) return {};
    const uint64_t key = pack(left, right);
    for (size_t i = mix(key) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return slots_[i].merge;
      if (slots_[i].key == kEmpty) return {};
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
  }
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge;
  };
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace loom
