// SplitMix64: a well-mixed 64-bit hash, cheap and identical on every platform. The samplers build their
// deterministic choices from it, so a batch depends only on (seed, step, index), never on library RNGs.
#pragma once
#include <cstdint>

namespace loom {

constexpr uint64_t kSplitMixIncrement = 0x9E3779B97F4A7C15ull;

inline uint64_t splitmix64(uint64_t x) {
  x += kSplitMixIncrement;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace loom
