#include "models/generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"

namespace loom {
namespace {

// logits: (V) float -> next token id.
int64_t pick(torch::Tensor logits, const SamplingOptions& o, at::Generator& generator) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    auto kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = logits.sort(/*dim=*/0, /*descending=*/true);
    auto cumulative = sorted.softmax(0).cumsum(0);
    // drop a token when the tokens ranked above it already hold top_p of the mass (the best one stays)
    auto drop_sorted = (cumulative - sorted.softmax(0)) >= o.top_p;
    auto drop = torch::zeros_like(drop_sorted).scatter(0, order, drop_sorted);
    logits = logits.masked_fill(drop, -std::numeric_limits<float>::infinity());
  }
  return torch::multinomial(logits.softmax(0), 1, false, generator).item<int64_t>();
}

}  // namespace

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, int64_t stop_token) {
  LOOM_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t context = model->config().max_seq_len;
  const auto device = model->parameters().front().device();
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);

  std::vector<int64_t> sequence = prompt;
  std::vector<int64_t> out;
  std::vector<KVCache> caches;
  int64_t fed = 0;  // tokens of `sequence` already in the caches
  auto as_tensor = [&](int64_t from) {
    std::vector<int64_t> window(sequence.begin() + from, sequence.end());
    return torch::tensor(window, torch::kLong).unsqueeze(0).to(device);
  };
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    torch::Tensor logits;
    const int64_t n = static_cast<int64_t>(sequence.size());
    if (options.use_cache && n <= context) {
      if (caches.empty()) caches.resize(model->n_blocks());
      logits = model->forward(as_tensor(fed), &caches);
    } else {
      // Beyond the context (or without a cache) the model sees the last max_seq_len tokens afresh.
      caches.clear();
      logits = model->forward(as_tensor(std::max<int64_t>(0, n - context)));
    }
    fed = n;
    const int64_t next = pick(logits[0][-1].to(torch::kFloat).cpu(), options, generator);
    out.push_back(next);
    sequence.push_back(next);
    if (next == stop_token) break;
  }
  return out;
}

}  // namespace loom
