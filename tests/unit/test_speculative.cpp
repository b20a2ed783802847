// Speculative decoding (serve/speculative.h, serve/drafter.h, serve/draft_model.h): greedy output with a draft
// model (k fixed and adaptive) and with n-gram drafting equals the target's alone for every request (mixed
// lengths, a pool small enough to preempt, prefix caching), every block of both pools is free afterwards; a draft equal to the target has every proposal
// accepted; sampled output follows the target's distribution (chi-square over 4,000 seeds, on the first token and
// on the pair of the first two, with and without top-k/top-p filters), and the same test rejects the draft's own
// distribution, which is what an always-accept rule would give; the n-gram lookup.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <random>

#include "models/generate.h"
#include "models/gpt.h"
#include "serve/draft_model.h"
#include "serve/drafter.h"
#include "serve/engine.h"
#include "serve/speculative.h"
#include "test_util.h"

namespace {

loom::Gpt spec_test_gpt(uint64_t seed, int64_t vocab, int64_t layers, int64_t max_seq_len = 48) {
  auto config = loom::test::small_gpt_config(vocab, /*d_model=*/32, layers, /*n_heads=*/4, max_seq_len);
  config.n_kv_heads = 2;
  config.position = loom::PositionKind::kRope;
  return loom::test::double_precision_gpt(config, seed);
}

// The chi-square statistic of counts against probabilities (cells expected below 5 pooled into one) and its
// critical value at significance 1e-3 (Wilson-Hilferty).
std::pair<double, double> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  double statistic = 0, pooled_expected = 0, pooled_observed = 0;
  int64_t cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * n;
    if (expected < 5) {
      pooled_expected += expected;
      pooled_observed += static_cast<double>(counts[i]);
      continue;
    }
    statistic += std::pow(static_cast<double>(counts[i]) - expected, 2) / expected;
    ++cells;
  }
  if (pooled_expected > 0) {
    statistic += std::pow(pooled_observed - pooled_expected, 2) / std::max(pooled_expected, 1e-9);
    ++cells;
  }
  const double df = static_cast<double>(cells - 1), z = 3.0902;  // z of 1 - 1e-3
  const double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  return {statistic, critical};
}

}  // namespace

TEST_CASE("speculative: n-gram lookup proposes what followed the latest match", "[serve][speculative]") {
  loom::NgramDrafter drafter(/*ngram_max=*/3, /*ngram_min=*/1);
  CHECK(drafter.lookup({1, 2, 3, 4, 9, 2, 3, 4, 7, 8, 2, 3, 4}, 2) == std::vector<int64_t>{7, 8});  // latest 3-gram
  CHECK(drafter.lookup({5, 6, 7, 1, 6, 7}, 4) == std::vector<int64_t>{1, 6, 7});  // runs into the end
  CHECK(drafter.lookup({5, 6, 1, 2, 9, 2}, 3) == std::vector<int64_t>{9, 2});  // falls back to the 1-gram
  CHECK(drafter.lookup({1, 2, 3}, 3).empty());
  CHECK(loom::speculative_room(4, 48, 40, 100) == 4);
  CHECK(loom::speculative_room(4, 48, 46, 100) == 2);  // positions 45..47 fed
  CHECK(loom::speculative_room(4, 48, 10, 3) == 2);    // 3 new tokens at most
  CHECK(loom::speculative_room(4, 48, 10, 1) == 0);
}

TEST_CASE("speculative: greedy output equals the target's alone, with a draft model and with n-grams",
          "[serve][speculative]") {
  auto target = spec_test_gpt(7, 61, 2);
  const auto kind = GENERATE(as<std::string>{}, "ngram", "draft", "self");
  const bool small_pool = GENERATE(false, true);
  INFO("drafter " << kind << (small_pool ? ", small pool" : ""));
  std::shared_ptr<loom::DraftModelDrafter> draft_model;
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = small_pool ? 16 : 512;  // 16: one 48-position sequence and four more blocks: preemption
  options.max_batch = 4;  // later requests are admitted after the first publish their prompt's blocks
  options.max_prefill_tokens = 40;
  options.speculate_k = kind == "ngram" ? 3 : 4;
  options.adaptive_k = kind == "draft";  // k follows each sequence's acceptance: the outputs stay the same
  options.prefix_caching = kind != "self";  // the prompts share a first block: rollbacks never touch shared blocks
  if (kind == "ngram") {
    options.drafter = std::make_shared<loom::NgramDrafter>(3, 1);
  } else {
    // "self": the target drafts for itself (every proposal must be accepted); "draft": the target's weights with
    // noise, so that it agrees often but not always.
    auto draft = target;
    if (kind == "draft") {
      draft = spec_test_gpt(7, 61, 2);
      torch::NoGradGuard no_grad;
      torch::manual_seed(11);
      for (auto& p : draft->parameters()) p.add_(torch::randn_like(p) * 0.1);
    }
    draft_model = std::make_shared<loom::DraftModelDrafter>(draft, /*blocks=*/small_pool ? 20 : 512,
                                                            /*block_size=*/4);
    options.drafter = draft_model;
  }
  loom::Engine engine(target, options);
  std::mt19937 rng(3);
  std::vector<loom::GenerationRequest> requests;
  for (int i = 0; i < 12; ++i) {
    loom::GenerationRequest r;
    const int64_t length = std::uniform_int_distribution<int64_t>(1, 14)(rng);
    const int64_t period = std::uniform_int_distribution<int64_t>(1, 4)(rng);  // repeats for the n-gram lookup
    r.prompt = {3, 8, 3, 8};  // one full block of 4 in common
    for (int64_t t = 0; t < length; ++t) r.prompt.push_back(static_cast<int64_t>((t % period) * 7 + i) % 61);
    r.max_tokens = std::uniform_int_distribution<int64_t>(1, 30)(rng);
    r.sampling.temperature = 0;
    requests.push_back(r);
    engine.add(r);
  }
  const auto completions = engine.run();
  REQUIRE(completions.size() == requests.size());
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    CHECK(completions[i].tokens == loom::generate(target, r.prompt, r.max_tokens, r.sampling));
    CHECK(completions[i].accepted <= completions[i].drafted);
    drafted += completions[i].drafted;
    accepted += completions[i].accepted;
  }
  CHECK(engine.stats().drafted_tokens == drafted);
  CHECK(engine.stats().accepted_tokens == accepted);
  CHECK(drafted > 0);
  CHECK(accepted > 0);
  if (kind == "self") CHECK(accepted == drafted);
  if (kind != "self") CHECK(accepted < drafted);
  if (small_pool) CHECK(engine.stats().preemptions > 0);
  if (options.prefix_caching) CHECK(engine.stats().prefix_hit_tokens > 0);
  CHECK(engine.pool().used_blocks() == 0);
  if (draft_model) CHECK(draft_model->pool().used_blocks() == 0);
}

TEST_CASE("speculative: sampled output follows the target's distribution (chi-square over 4,000 seeds)",
          "[serve][speculative]") {
  // A vocabulary of 8: the first token's 8 cells and the first two tokens' 64 cells, counted over 4,000 seeds,
  // against the target's own (filtered) softmax; a draft model that disagrees with it proposes.
  torch::NoGradGuard no_grad;
  constexpr int64_t kVocab = 8, kSeeds = 4000;
  auto target = spec_test_gpt(5, kVocab, 2);
  auto draft = spec_test_gpt(6, kVocab, 1);
  loom::SamplingOptions sampling;
  const bool filtered = GENERATE(false, true);
  if (filtered) {
    sampling.temperature = 0.8;
    sampling.top_k = 6;
    sampling.top_p = 0.95;
  }
  INFO((filtered ? "temperature 0.8, top-k 6, top-p 0.95" : "temperature 1"));
  const std::vector<int64_t> prompt{1, 2, 3};
  const auto next = [&](std::vector<int64_t> tokens) {
    const auto logits = target->forward(torch::tensor(tokens, torch::kLong).unsqueeze(0))[0][-1].to(torch::kFloat);
    return loom::sampling_probabilities(logits, sampling).to(torch::kDouble);
  };
  const auto first = next(prompt);
  std::vector<double> p_first(kVocab), p_pair(kVocab * kVocab);
  for (int64_t a = 0; a < kVocab; ++a) {
    p_first[a] = first[a].item<double>();
    auto with_a = prompt;
    with_a.push_back(a);
    const auto second = next(with_a);
    for (int64_t b = 0; b < kVocab; ++b) p_pair[a * kVocab + b] = p_first[a] * second[b].item<double>();
  }

  auto drafter = std::make_shared<loom::DraftModelDrafter>(draft, /*blocks=*/kSeeds + 64, /*block_size=*/4);
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = 1024;
  options.max_batch = 64;
  options.drafter = drafter;
  options.speculate_k = 2;
  loom::Engine engine(target, options);
  for (int64_t seed = 0; seed < kSeeds; ++seed) {
    loom::GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 3;  // a first step of two proposals and the target's token
    r.sampling = sampling;
    r.sampling.seed = static_cast<uint64_t>(seed);
    engine.add(r);
  }
  std::vector<int64_t> first_counts(kVocab), pair_counts(kVocab * kVocab);
  for (const auto& c : engine.run()) {
    REQUIRE(c.tokens.size() == 3);
    ++first_counts[c.tokens[0]];
    ++pair_counts[c.tokens[0] * kVocab + c.tokens[1]];
  }
  const double rate = static_cast<double>(engine.stats().accepted_tokens) / engine.stats().drafted_tokens;
  INFO("acceptance rate " << rate);
  CHECK(rate > 0.05);
  CHECK(rate < 0.95);  // the draft disagrees often enough to exercise the residual draws
  const auto [first_statistic, first_critical] = chi_square(first_counts, p_first);
  const auto [pair_statistic, pair_critical] = chi_square(pair_counts, p_pair);
  INFO("first token: chi-square " << first_statistic << " (critical " << first_critical << "); first two: "
                                  << pair_statistic << " (critical " << pair_critical << ")");
  CHECK(first_statistic < first_critical);
  CHECK(pair_statistic < pair_critical);

  // A wrong rule fails the same test: always accepting would emit the draft's own proposals, which follow q. (By
  // hand, drawing the token after a rejection from p instead of norm(max(0, p - q)) failed both variants too:
  // first-token chi-square 323 and 235 against critical values 24.5 and 20.8, pairs 839 and 760.)
  std::vector<at::Generator> generators;
  std::vector<loom::DraftRow> rows;
  for (int64_t seed = 0; seed < kSeeds; ++seed) generators.push_back(loom::sampling_generator(seed + 100000));
  for (int64_t seed = 0; seed < kSeeds; ++seed)
    rows.push_back({seed, &prompt, &sampling, &generators[static_cast<size_t>(seed)]});
  std::vector<int64_t> draft_counts(kVocab);
  for (const auto& d : drafter->propose(rows, 1)) ++draft_counts[d.tokens.at(0)];
  const auto [wrong_statistic, wrong_critical] = chi_square(draft_counts, p_first);
  INFO("always accept: chi-square " << wrong_statistic << " (critical " << wrong_critical << ")");
  CHECK(wrong_statistic > wrong_critical);
}
