// GPT: counts worked by hand, initialization, causality, and generation (sampling, top-k / top-p, stop
// tokens). Every variant's counts, KV cache and golden logits are in test_model_variants.cpp.
#include <cmath>
#include <set>

#include "core/error.h"
#include "models/generate.h"
#include "models/gpt.h"
#include "test_util.h"

using loom::test::max_abs_diff;

namespace {

loom::ModelConfig small_config(bool tied = true) {
  auto c = loom::test::small_gpt_config(/*vocab_size=*/97, /*d_model=*/64, /*n_layers=*/2, /*n_heads=*/4,
                                        /*max_seq_len=*/64);
  c.tie_embeddings = tied;
  return c;
}

torch::Tensor tokens_of(const std::vector<int64_t>& ids) { return torch::tensor(ids, torch::kLong).unsqueeze(0); }

}  // namespace

TEST_CASE("gpt: parameter and FLOP counts worked by hand", "[models]") {
  // Untying adds exactly one V x C matrix (see test_model_variants.cpp for every variant against built models).
  CHECK(loom::count_parameters(small_config(false)) - loom::count_parameters(small_config(true)) == 97 * 64);
  // 2 x (4 x 64^2 + 2 x 64 x 256) + 97 x 64 = 104512 weights a token multiplies through.
  CHECK(loom::training_flops_per_token(small_config(), 32) == Approx(6.0 * 104512 + 12.0 * 2 * 64 * 32));
}

TEST_CASE("gpt: a model needs a vocabulary size and fits its context", "[models]") {
  auto config = small_config();
  config.vocab_size = 0;
  CHECK_THROWS_AS(loom::Gpt(config), loom::Error);
  loom::Gpt model(small_config());
  CHECK_NOTHROW(model->forward(torch::zeros({1, 64}, torch::kLong)));
  CHECK_THROWS(model->forward(torch::zeros({1, 65}, torch::kLong)));
}

TEST_CASE("gpt: initialization follows init_std and the residual scaling", "[models]") {
  torch::manual_seed(0);
  loom::ModelConfig config = small_config();
  config.d_model = 256;
  config.n_layers = 8;
  config.n_heads = 8;
  config.vocab_size = 1000;
  loom::Gpt model(config);
  const auto p = model->named_parameters();
  const double residual_std = 0.02 / std::sqrt(2.0 * 8);
  CHECK(p["token_embedding.weight"].std().item<double>() == Approx(0.02).epsilon(0.02));
  CHECK(p["blocks.0.attention.qkv.weight"].std().item<double>() == Approx(0.02).epsilon(0.02));
  CHECK(p["blocks.7.attention.out.weight"].std().item<double>() == Approx(residual_std).epsilon(0.02));
  CHECK(p["blocks.3.mlp.up.weight"].std().item<double>() == Approx(0.02).epsilon(0.02));
  CHECK(p["blocks.3.mlp.down.weight"].std().item<double>() == Approx(residual_std).epsilon(0.02));
  CHECK(p["blocks.3.mlp.up.bias"].abs().max().item<double>() == 0.0);
  CHECK(p["blocks.5.ln2.weight"].eq(1).all().item<bool>());
  CHECK(p["final_norm.bias"].abs().max().item<double>() == 0.0);
}

TEST_CASE("gpt: earlier logits do not depend on later tokens", "[models]") {
  torch::manual_seed(6);
  loom::Gpt model(small_config());
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 97, {1, 16}, torch::kLong);
  const auto before = model->forward(tokens);
  tokens[0][10] = (tokens[0][10].item<int64_t>() + 1) % 97;
  const auto after = model->forward(tokens);
  using torch::indexing::Slice;
  CHECK(max_abs_diff(before.index({Slice(), Slice(0, 10)}), after.index({Slice(), Slice(0, 10)})) <= 1e-6);
  CHECK(max_abs_diff(before.index({Slice(), Slice(10, 16)}), after.index({Slice(), Slice(10, 16)})) > 1e-4);
}

TEST_CASE("generate: greedy decoding is the same with and without the KV cache", "[models][generate]") {
  torch::manual_seed(7);
  loom::Gpt model(small_config());
  const std::vector<int64_t> prompt = {5, 17, 42, 3};
  loom::SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.use_cache = true;
  const auto cached = loom::generate(model, prompt, 40, greedy);
  greedy.use_cache = false;
  const auto uncached = loom::generate(model, prompt, 40, greedy);
  REQUIRE(cached.size() == 40);
  CHECK(cached == uncached);

  // The first new token is the argmax of the full forward's last position.
  torch::NoGradGuard no_grad;
  CHECK(cached[0] == model->forward(tokens_of(prompt))[0][-1].argmax().item<int64_t>());
  // And each following one is the argmax given everything before it.
  std::vector<int64_t> sequence = prompt;
  bool all_argmax = true;
  for (int64_t next : cached) {
    all_argmax &= next == model->forward(tokens_of(sequence))[0][-1].argmax().item<int64_t>();
    sequence.push_back(next);
  }
  CHECK(all_argmax);
}

TEST_CASE("generate: beyond max_seq_len the cached and uncached paths agree", "[models][generate]") {
  torch::manual_seed(8);
  auto config = small_config();
  config.max_seq_len = 16;
  loom::Gpt model(config);
  loom::SamplingOptions greedy;
  greedy.temperature = 0;
  const std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto cached = loom::generate(model, prompt, 30, greedy);
  greedy.use_cache = false;
  CHECK(cached == loom::generate(model, prompt, 30, greedy));
  CHECK(cached.size() == 30);
}

TEST_CASE("generate: sampling is reproducible from its seed and respects top-k / top-p", "[models][generate]") {
  torch::manual_seed(9);
  loom::Gpt model(small_config(/*tied=*/false));
  {
    // Logits of std ~1 rather than ~0.2: a distribution that top-k and top-p cuts visibly.
    torch::NoGradGuard no_grad;
    model->named_parameters()["lm_head.weight"].mul_(5);
  }
  const std::vector<int64_t> prompt = {1, 2, 3};
  loom::SamplingOptions options;
  options.temperature = 1.0;
  options.seed = 123;
  const auto a = loom::generate(model, prompt, 40, options);
  CHECK(std::set<int64_t>(a.begin(), a.end()).size() >= 10);  // really sampled, not near-greedy
  CHECK(a == loom::generate(model, prompt, 40, options));
  options.use_cache = false;
  CHECK(a == loom::generate(model, prompt, 40, options));  // the cache does not change sampling
  options.use_cache = true;
  options.seed = 124;
  CHECK(a != loom::generate(model, prompt, 40, options));

  loom::SamplingOptions greedy;
  greedy.temperature = 0;
  const auto argmax = loom::generate(model, prompt, 20, greedy);
  options.top_k = 1;
  CHECK(loom::generate(model, prompt, 20, options) == argmax);
  options.top_k = 0;
  options.top_p = 1e-6;  // only the most likely token is left
  CHECK(loom::generate(model, prompt, 20, options) == argmax);

  // Each sampled token is within the filter, judged from the full forward's distribution.
  torch::NoGradGuard no_grad;
  const std::vector<std::pair<int64_t, double>> filters = {{3, 1.0}, {0, 0.6}};
  for (auto [top_k, top_p] : filters) {
    INFO("top_k " << top_k << " top_p " << top_p);
    options.top_k = top_k;
    options.top_p = top_p;
    options.temperature = 0.8;
    std::vector<int64_t> sequence = prompt;
    bool all_inside = true;
    for (int64_t next : loom::generate(model, prompt, 40, options)) {
      const auto probs = (model->forward(tokens_of(sequence))[0][-1] / 0.8).softmax(0);
      const double p_next = probs[next].item<double>();
      const int64_t rank = probs.gt(p_next).sum().item<int64_t>();  // tokens strictly more likely
      const double mass_above = probs.masked_select(probs.gt(p_next)).sum().item<double>();
      if (top_k > 0) all_inside &= rank < top_k;
      if (top_p < 1) all_inside &= mass_above < top_p;
      sequence.push_back(next);
    }
    CHECK(all_inside);
  }
}

TEST_CASE("generate: stops at the stop token", "[models][generate]") {
  torch::manual_seed(10);
  loom::Gpt model(small_config());
  loom::SamplingOptions greedy;
  greedy.temperature = 0;
  const auto free_run = loom::generate(model, {4, 8}, 10, greedy);
  const auto stopped = loom::generate(model, {4, 8}, 10, greedy, /*stop_token=*/free_run[2]);
  // It stops at the first occurrence of the stop token, which it includes.
  size_t first = 0;
  while (free_run[first] != free_run[2]) ++first;
  CHECK(stopped == std::vector<int64_t>(free_run.begin(), free_run.begin() + static_cast<int64_t>(first) + 1));
  CHECK_THROWS_AS(loom::generate(model, {}, 5, greedy), loom::Error);
}
