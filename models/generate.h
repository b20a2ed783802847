// Autoregressive sampling from a GPT: greedy (temperature 0) or temperature / top-k / top-p sampling
// with its own seeded generator, with or without a KV cache (both give the same tokens).
#pragma once
#include <cstdint>
#include <functional>
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

// logits: (V) float -> the next token: the argmax (temperature 0), else drawn from `generator` after the
// temperature, top-k and top-p filters.
int64_t sample_token(torch::Tensor logits, const SamplingOptions& options, at::Generator& generator);
// logits: (V) float -> the distribution sample_token draws from (temperature > 0): the softmax after the
// temperature, top-k and top-p filters (speculative decoding filters target and draft alike with it).
torch::Tensor sampling_probabilities(torch::Tensor logits, const SamplingOptions& options);
// The CPU generator sampling draws from, seeded: one per sequence, so its tokens depend on its seed alone.
at::Generator sampling_generator(uint64_t seed);

// Hands each new token to on_token as soon as it is sampled. Stops after max_new_tokens, at stop_token if
// one is given (>= 0; it is handed on first), or when on_token returns false. Memory stays within the
// context (model.max_seq_len tokens) however many tokens are generated.
void generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens, const SamplingOptions& options,
              const std::function<bool(int64_t)>& on_token, int64_t stop_token = -1);

// The same, returning the new tokens only.
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, int64_t stop_token = -1);

}  // namespace loom
