#include "models/generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
#include "models/few_rows_linear.h"

namespace loom {

torch::Tensor sampling_probabilities(torch::Tensor logits, const SamplingOptions& o) {
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
  return logits.softmax(0);
}

int64_t sample_token(torch::Tensor logits, const SamplingOptions& o, at::Generator& generator) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  return torch::multinomial(sampling_probabilities(logits, o), 1, false, generator).item<int64_t>();
}

at::Generator sampling_generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

void generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens, const SamplingOptions& options,
              const std::function<bool(int64_t)>& on_token, int64_t stop_token) {
  LOOM_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  InferenceScope inference;  // no gradients; the few-row kernel (models/few_rows_linear.h)
  model->eval();
  const size_t context = static_cast<size_t>(model->config().max_seq_len);
  const auto device = model->parameters().front().device();
  at::Generator generator = sampling_generator(options.seed);

  // The model sees `window`: all tokens while they fit the context and the cache holds their keys and
  // values, then the last max_seq_len tokens afresh each step.
  std::vector<int64_t> window = prompt;
  bool cached = options.use_cache;
  KVCaches caches;
  size_t fed = 0;  // tokens of `window` already in the caches
  auto as_tensor = [&](size_t from) {
    const std::vector<int64_t> ids(window.begin() + static_cast<std::ptrdiff_t>(from), window.end());
    return torch::tensor(ids, torch::kLong).unsqueeze(0).to(device);
  };
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    if (cached && window.size() > context) {
      cached = false;
      caches = KVCaches();
    }
    torch::Tensor logits;
    if (cached) {
      if (caches.size() == 0) caches = model->new_caches();
      logits = model->forward(as_tensor(fed), &caches);
      fed = window.size();
    } else {
      if (window.size() > context) window.erase(window.begin(), window.end() - static_cast<std::ptrdiff_t>(context));
      logits = model->forward(as_tensor(0));
    }
    const int64_t next = sample_token(logits[0][-1].to(torch::kFloat).cpu(), options, generator);
    window.push_back(next);
    if (!on_token(next) || next == stop_token) break;
  }
}

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, int64_t stop_token) {
  std::vector<int64_t> out;
  generate(model, prompt, max_new_tokens, options, [&](int64_t id) {
    out.push_back(id);
    return true;
  }, stop_token);
  return out;
}

}  // namespace loom
