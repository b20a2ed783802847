// A 64-bit hash of a document's bytes (FNV-1a, then SplitMix64 to mix it well): identical on every
// platform and run, so the choices `loom prepare` makes from it (which split a document goes to, whether
// the tokenizer's sample takes it) depend on the text alone, never on threads or input order.
#pragma once
#include <cstdint>
#include <string_view>

#include "data/corpus/splitmix.h"

namespace loom {

inline uint64_t text_hash(std::string_view text, uint64_t seed = 0) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (const char c : text) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return splitmix64(h);
}

// The hash as a number in [0, 1).
inline double text_draw(std::string_view text, uint64_t seed = 0) {
  return static_cast<double>(text_hash(text, seed) >> 11) * 0x1.0p-53;
}

}  // namespace loom
