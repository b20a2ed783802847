// The engine's block accounting under churn (serve/engine.h, models/paged_kv_cache.h): 1,000 requests with shared
// prompt prefixes through a small pool with prefix caching, cancelled at random while waiting, mid-prefill and
// mid-decode; after every step the pool's counts match the live sequences' tables (KVBlockPool::audit) and at the
// end every block is free again (also with a sliding window: 300 requests). A sliding-window model gives its blocks back while its sequences run: the pool
// holds about window / block_size blocks per sequence, and the outputs are still those of decoding alone.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "models/generate.h"
#include "models/gpt.h"
#include "serve/engine.h"
#include "test_util.h"

namespace {

loom::Gpt churn_test_gpt(int64_t window, int64_t max_seq_len) {
  auto config = loom::test::small_gpt_config(/*vocab_size=*/37, /*d_model=*/16, /*n_layers=*/2, /*n_heads=*/2,
                                             max_seq_len);
  config.position = loom::PositionKind::kRope;
  config.attention_window = window;
  return loom::test::double_precision_gpt(config, 3);
}

}  // namespace

TEST_CASE("engine churn: 1,000 requests cancelled waiting, mid-prefill and mid-decode leave every block free",
          "[serve]") {
  const int64_t window = GENERATE(0, 6);
  const int64_t requests = window == 0 ? 1000 : 300;  // the windowed model's in fewer: its forwards cost more
  INFO("window " << window);
  auto gpt = churn_test_gpt(window, 32);
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = 20;  // a few sequences at once: preemption and eviction happen
  options.max_batch = 12;
  options.max_prefill_tokens = 6;  // long prompts take several steps: cancellations land mid-prefill
  options.prefix_caching = true;
  loom::Engine engine(gpt, options);
  std::mt19937 rng(window + 1);
  std::uniform_int_distribution<int64_t> length(1, 24), max_tokens(0, 10), coin(0, 99), token(0, 36);
  // Four shared openings, so prefixes are found in the cache, shared and evicted.
  std::vector<std::vector<int64_t>> openings(4);
  for (auto& o : openings)
    for (int i = 0; i < 12; ++i) o.push_back(token(rng));
  std::vector<int64_t> live;
  std::map<loom::Engine::Phase, int64_t> cancelled_in;
  int64_t added = 0, finished = 0, audits_failed = 0;
  std::string first_failure;
  for (int step = 0; added < requests || !engine.idle(); ++step) {
    REQUIRE(step < 20000);
    for (int k = 0; k < 3 && added < requests; ++k) {
      if (coin(rng) >= 45) continue;
      loom::GenerationRequest r;
      const int64_t n = length(rng);
      if (coin(rng) < 50) r.prompt = openings[static_cast<size_t>(coin(rng) % 4)];
      while (static_cast<int64_t>(r.prompt.size()) < n) r.prompt.push_back(token(rng));
      r.prompt.resize(static_cast<size_t>(std::max<int64_t>(n, 1)));
      r.max_tokens = max_tokens(rng);
      r.sampling.temperature = 1.0;
      r.sampling.seed = static_cast<uint64_t>(added);
      live.push_back(engine.add(r));
      ++added;
    }
    if (!live.empty() && coin(rng) < 30) {
      const size_t pick = static_cast<size_t>(rng() % live.size());
      const auto phase = engine.phase(live[pick]);
      if (phase != loom::Engine::Phase::kGone) {
        CHECK(engine.cancel(live[pick]));
        ++cancelled_in[phase];
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    for (const auto& c : engine.step()) {
      ++finished;
      (void)c;
    }
    const auto audit = engine.audit();
    if (!audit.empty() && audits_failed++ == 0) first_failure = "step " + std::to_string(step) + ": " + audit;
  }
  INFO(first_failure);
  CHECK(audits_failed == 0);
  CHECK(finished == added);
  CHECK(cancelled_in[loom::Engine::Phase::kWaiting] > 0);
  CHECK(cancelled_in[loom::Engine::Phase::kPrefilling] > 0);
  CHECK(cancelled_in[loom::Engine::Phase::kDecoding] > 0);
  CHECK(engine.stats().preemptions > 0);
  CHECK(engine.stats().prefix_hit_tokens > 0);
  CHECK(engine.pool().used_blocks() == 0);
  CHECK(engine.pool().free_blocks() == engine.pool().blocks());
  CHECK(engine.audit().empty());
}

TEST_CASE("KV block pool: audit finds a leaked block, a double reference and a sliding window's freed blocks",
          "[serve]") {
  loom::KVBlockPool pool(/*layers=*/1, /*blocks=*/6, /*block_size=*/2, /*kv_heads=*/1, /*head_dim=*/2, torch::kFloat);
  loom::BlockTable a, b;
  REQUIRE(pool.reserve(a, 7));  // 4 blocks
  CHECK(pool.audit({&a}).empty());
  CHECK(pool.audit({}).find("has 1 references but 0 tables hold it") != std::string::npos);  // a leak
  b.blocks = {a.blocks[0]};
  CHECK(pool.audit({&a, &b}).find("has 1 references but 2 tables hold it") != std::string::npos);
  pool.release_before(a, 5);  // positions 0..3: blocks 0 and 1 back, block 2 (positions 4, 5) kept
  CHECK(a.blocks[0] == loom::kNoBlock);
  CHECK(a.blocks[1] == loom::kNoBlock);
  CHECK(a.blocks[2] != loom::kNoBlock);
  CHECK(pool.used_blocks() == 2);
  CHECK(pool.audit({&a}).empty());
  pool.release(a);
  CHECK(pool.free_blocks() == 6);
  CHECK(pool.audit({}).empty());
}

TEST_CASE("engine churn: a sliding-window model's sequences hold about window / block_size blocks", "[serve]") {
  const bool prefix_caching = GENERATE(false, true);
  INFO("prefix caching " << prefix_caching);
  const int64_t window = 8, block = 4, context = 64;
  auto gpt = churn_test_gpt(window, context);
  loom::EngineOptions options;
  options.block_size = block;
  options.kv_blocks = 64;
  options.max_batch = 4;
  options.max_prefill_tokens = 64;
  options.prefix_caching = prefix_caching;
  loom::Engine engine(gpt, options);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> token(0, 36);
  std::vector<int64_t> shared;
  for (int i = 0; i < 20; ++i) shared.push_back(token(rng));
  std::vector<loom::GenerationRequest> requests(4);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto& r = requests[i];
    r.prompt = shared;  // a common opening: shared, then its early blocks released by each
    for (int k = 0; k < 10 + 3 * static_cast<int>(i); ++k) r.prompt.push_back(token(rng));
    r.max_tokens = 24;
    r.sampling.temperature = 0.0;
    engine.add(r);
  }
  // After the prefill every sequence holds the blocks of its last `window` positions and the one being written:
  // at most window / block + 2 blocks, not the (30 + 24) / 4 of its whole length.
  const int64_t per_sequence = window / block + 2;
  std::vector<loom::Completion> done;
  int64_t decoding_steps = 0;
  while (!engine.idle()) {
    for (auto& c : engine.step()) done.push_back(std::move(c));
    REQUIRE(engine.audit().empty());
    bool all_decoding = engine.running() > 0;
    for (int64_t id = 0; id < 4; ++id)
      if (engine.phase(id) != loom::Engine::Phase::kGone && engine.phase(id) != loom::Engine::Phase::kDecoding)
        all_decoding = false;
    if (!all_decoding) continue;
    ++decoding_steps;
    CHECK(engine.pool().used_blocks() <= engine.running() * per_sequence);
  }
  CHECK(decoding_steps >= 20);
  CHECK(engine.pool().used_blocks() == 0);
  REQUIRE(done.size() == 4);
  for (const auto& c : done) {
    const auto& r = requests[static_cast<size_t>(c.id)];
    CHECK(c.tokens == loom::generate(gpt, r.prompt, r.max_tokens, r.sampling));
  }
}
