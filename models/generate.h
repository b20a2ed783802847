// Autoregressive sampling from a GPT: greedy (temperature 0) or temperature / top-k / top-p sampling
// with its own seeded generator, with or without a KV cache (both give the same tokens).
#pragma once
#include <cstdint>
#include <vector>

#include "models/gpt.h"

namespace loom {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no top-k filter
  double top_p = 1.0;        // 1: no nucleus filter
  uint64_t seed = 0;
  bool use_cache = true;
};

// Returns the new tokens only. Stops after max_new_tokens, or at stop_token if one is given (>= 0).
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, int64_t stop_token = -1);

}  // namespace loom
