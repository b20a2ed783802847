// The inference engine (serve/engine.h) over the paged KV cache (models/paged_kv_cache.h): the paged cache gives
// the contiguous cache's outputs, also to a ragged batch of sequences at different positions; continuous
// batching gives every request the tokens of decoding it alone, with a pool so small that sequences are
// preempted and recomputed and with prompts prefilled in chunks too; every block is free again after
// cancellations and stop strings; streamed pieces add up to the completions; prefix caching changes no output; the server's engine worker thread
// gives requests from many threads the engine's own outputs.
#include <catch2/catch.hpp>

#include <random>
#include <thread>

#include "models/generate.h"
#include "models/gpt.h"
#include "models/paged_kv_cache.h"
#include "serve/engine.h"
#include "serve/engine_worker.h"
#include "test_util.h"

namespace {

loom::Gpt engine_test_gpt(loom::PositionKind position, int64_t kv_heads, int64_t window, int64_t max_seq_len = 48) {
  auto config = loom::test::small_gpt_config(/*vocab_size=*/61, /*d_model=*/32, /*n_layers=*/2, /*n_heads=*/4,
                                             max_seq_len);
  config.n_kv_heads = kv_heads;
  config.position = position;
  config.attention_window = window;
  return loom::test::double_precision_gpt(config, 7);
}

std::vector<int64_t> random_tokens(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int64_t> token(0, 60);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(token(rng));
  return out;
}

}  // namespace

TEST_CASE("engine: the paged cache gives the contiguous cache's outputs, to a ragged batch too", "[models][serve]") {
  torch::NoGradGuard no_grad;
  struct Variant {
    loom::PositionKind position;
    int64_t kv_heads, window;
  };
  const auto variant = GENERATE(Variant{loom::PositionKind::kRope, 2, 5}, Variant{loom::PositionKind::kAlibi, 4, 0},
                                Variant{loom::PositionKind::kLearned, 1, 0});
  INFO("position " << static_cast<int>(variant.position) << ", " << variant.kv_heads << " kv heads, window "
                    << variant.window);
  auto gpt = engine_test_gpt(variant.position, variant.kv_heads, variant.window, 32);
  const int64_t K = gpt->config().kv_heads(), D = gpt->config().head_dim();
  loom::KVBlockPool pool(gpt->n_blocks(), /*blocks=*/24, /*block_size=*/4, K, D, torch::kDouble);

  // One sequence fed in chunks: the same keys, so the same logits (to the last bits: SDPA may take another path
  // over a gathered tensor).
  const auto tokens = torch::randint(0, 61, {1, 14}, torch::kLong);
  loom::BlockTable table;
  auto paged = loom::paged_kv_caches(pool, {&table});
  auto contiguous = gpt->new_caches();
  for (auto [from, to] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 6}, {6, 11}, {11, 14}}) {
    const auto piece = tokens.narrow(1, from, to - from);
    CHECK(torch::allclose(gpt->forward(piece, &paged), gpt->forward(piece, &contiguous), 1e-12, 1e-12));
  }
  CHECK(table.length == 14);
  CHECK(table.blocks.size() == 4);

  // Three sequences of 3, 9 and 14 positions, then a ragged batch of two new positions each: each row's logits
  // are its sequence's alone.
  std::vector<loom::BlockTable> tables(3);
  std::vector<loom::KVCaches> alone;
  const std::vector<int64_t> lengths{3, 9, 14};
  const auto prompts = torch::randint(0, 61, {3, 14}, torch::kLong);
  for (size_t i = 0; i < 3; ++i) {
    auto caches = loom::paged_kv_caches(pool, {&tables[i]});
    alone.push_back(gpt->new_caches());
    const auto prompt = prompts.narrow(0, static_cast<int64_t>(i), 1).narrow(1, 0, lengths[i]);
    gpt->forward(prompt, &caches);
    gpt->forward(prompt, &alone.back());
  }
  auto batch = loom::paged_kv_caches(pool, {&tables[0], &tables[1], &tables[2]});
  CHECK(batch.seen_rows().defined());
  for (int step = 0; step < 2; ++step) {
    const auto next = torch::randint(0, 61, {3, 2}, torch::kLong);
    const auto logits = gpt->forward(next, &batch);
    for (int64_t i = 0; i < 3; ++i) {
      const auto expected = gpt->forward(next.narrow(0, i, 1), &alone[static_cast<size_t>(i)]);
      CHECK(torch::allclose(logits.narrow(0, i, 1), expected, 1e-9, 1e-9));
    }
  }
  CHECK(tables[0].length == 7);
  CHECK(tables[2].length == 18);
  for (auto& t : tables) pool.release(t);
  pool.release(table);
  CHECK(pool.free_blocks() == pool.blocks());
}

TEST_CASE("engine: 64 requests arriving at random steps get the tokens of decoding each alone", "[serve]") {
  const bool small_pool = GENERATE(false, true);
  const bool rope = GENERATE(true, false);
  auto gpt = rope ? engine_test_gpt(loom::PositionKind::kRope, 2, 0) : engine_test_gpt(loom::PositionKind::kLearned, 4, 12);
  std::mt19937 rng(small_pool ? 11 : 12);
  std::uniform_int_distribution<int64_t> prompt_length(1, 20), max_tokens(1, 24), arrival(0, 40), seed(0, 1000);
  std::vector<loom::GenerationRequest> requests(64);
  std::vector<int64_t> arrives;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto& r = requests[i];
    r.prompt = random_tokens(rng, prompt_length(rng));
    r.max_tokens = max_tokens(rng);
    r.sampling.temperature = i % 4 == 3 ? 0.9 : 0.0;  // a quarter sampled: their seeds alone decide
    r.sampling.top_k = i % 8 == 3 ? 10 : 0;
    r.sampling.top_p = i % 8 == 7 ? 0.8 : 1.0;
    r.sampling.seed = static_cast<uint64_t>(seed(rng));
    arrives.push_back(arrival(rng));
  }
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = small_pool ? 14 : 512;  // 14: one 48-position sequence and two more blocks
  options.max_batch = 32;
  options.max_prefill_tokens = small_pool ? 7 : 40;  // 7: long prompts prefilled in chunks over several steps
  loom::Engine engine(gpt, options);
  std::vector<loom::Completion> completions;
  std::map<int64_t, size_t> request_of;
  for (int64_t step = 0; completions.size() < requests.size(); ++step) {
    for (size_t i = 0; i < requests.size(); ++i)
      if (arrives[i] == step) request_of[engine.add(requests[i])] = i;
    for (auto& c : engine.step()) completions.push_back(std::move(c));
    REQUIRE(step < 5000);
  }
  CHECK(engine.idle());
  CHECK(engine.pool().free_blocks() == engine.pool().blocks());
  if (small_pool) CHECK(engine.stats().preemptions > 0);
  for (const auto& c : completions) {
    const auto& r = requests[request_of.at(c.id)];
    const auto expected = loom::generate(gpt, r.prompt, r.max_tokens, r.sampling);
    INFO("request " << request_of.at(c.id) << " temperature " << r.sampling.temperature << " preempted "
                    << c.preemptions << " times");
    CHECK(c.finish == loom::FinishReason::kLength);
    CHECK(c.tokens == expected);
  }
}

TEST_CASE("engine: every block is free again after random cancellations, stop tokens and stop strings", "[serve]") {
  auto gpt = engine_test_gpt(loom::PositionKind::kRope, 2, 0, 32);
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = 12;
  options.max_batch = 16;
  // token t reads as the letter 'a' + t % 26
  options.detokenize = [](const std::vector<int64_t>& tokens) {
    std::string text;
    for (const auto t : tokens) text += static_cast<char>('a' + t % 26);
    return text;
  };
  loom::Engine engine(gpt, options);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> length(1, 24), max_tokens(0, 20), coin(0, 9);
  std::vector<int64_t> live;
  std::map<loom::FinishReason, int64_t> reasons;
  std::map<int64_t, bool> has_stop;
  int64_t added = 0, finished = 0;
  for (int step = 0; step < 400 || !engine.idle(); ++step) {
    if (step < 400 && coin(rng) < 6) {
      loom::GenerationRequest r;
      r.prompt = random_tokens(rng, length(rng));
      r.max_tokens = max_tokens(rng);
      r.sampling.temperature = 1.0;
      r.sampling.seed = static_cast<uint64_t>(step);
      if (coin(rng) < 3) r.stop = {"e", "xy"};
      if (coin(rng) < 3) r.stop_token = 0;
      live.push_back(engine.add(r));
      has_stop[live.back()] = !r.stop.empty();
      ++added;
    }
    if (!live.empty() && coin(rng) < 2) {
      const size_t pick = static_cast<size_t>(rng() % live.size());
      engine.cancel(live[pick]);  // false when it already finished
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    for (const auto& c : engine.step()) {
      ++finished;
      ++reasons[c.finish];
      if (has_stop[c.id]) CHECK(c.text.find('e') == std::string::npos);  // cut before the first stop string
      CHECK(c.text.size() <= c.tokens.size());
    }
    CHECK(engine.pool().used_blocks() <= engine.pool().blocks());
  }
  CHECK(finished == added);
  CHECK(reasons[loom::FinishReason::kCancelled] > 0);
  CHECK(reasons[loom::FinishReason::kStop] > 0);
  CHECK(engine.stats().preemptions > 0);
  CHECK(engine.pool().free_blocks() == engine.pool().blocks());
  CHECK_FALSE(engine.cancel(0));
}

TEST_CASE("engine: streamable_length holds back a suffix that begins a stop string and an incomplete character",
          "[serve]") {
  CHECK(loom::streamable_length("hello wor", {"world"}) == 6);
  CHECK(loom::streamable_length("hello wor", {"xyz"}) == 9);
  CHECK(loom::streamable_length("abcab", {"cabd", "bx"}) == 2);  // the longest suffix that begins a stop string
  CHECK(loom::streamable_length("ab\xEF\xBF\xBD", {}) == 2);
  CHECK(loom::streamable_length("abc", {""}) == 3);
  CHECK(loom::streamable_length("", {"a"}) == 0);
}

TEST_CASE("engine: a streamed request's pieces add up to its completion and never pass a stop string", "[serve]") {
  auto gpt = engine_test_gpt(loom::PositionKind::kRope, 2, 0, 32);
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = 40;
  options.max_batch = 8;
  options.detokenize = [](const std::vector<int64_t>& tokens) {  // two letters a token: stops can span tokens
    std::string text;
    for (const auto t : tokens) text += std::string{static_cast<char>('a' + t % 5), static_cast<char>('a' + t % 3)};
    return text;
  };
  loom::Engine engine(gpt, options);
  std::mt19937 rng(9);
  std::map<int64_t, std::vector<int64_t>> tokens;
  std::map<int64_t, std::vector<double>> logprobs;
  std::map<int64_t, std::string> text;
  std::map<int64_t, int64_t> finals;
  std::vector<loom::Completion> done;
  for (int i = 0; i < 24; ++i) {
    loom::GenerationRequest r;
    r.prompt = random_tokens(rng, 1 + i % 7);
    r.max_tokens = 4 + i % 9;
    r.sampling.temperature = 1.0;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.stream = true;
    r.logprobs = i % 2 == 0;
    if (i % 3 != 0) r.stop = {"dc", "eab"};
    engine.add(r);
  }
  int64_t cut = 0;
  while (!engine.idle()) {
    for (auto& c : engine.step()) done.push_back(std::move(c));
    for (const auto& d : engine.take_deltas()) {
      CHECK(finals[d.id] == 0);  // nothing after the final piece
      tokens[d.id].insert(tokens[d.id].end(), d.tokens.begin(), d.tokens.end());
      logprobs[d.id].insert(logprobs[d.id].end(), d.logprobs.begin(), d.logprobs.end());
      text[d.id] += d.text;
      finals[d.id] += d.final;
      if (d.id % 3 != 0) CHECK(text[d.id].find("dc") == std::string::npos);
      if (d.id % 3 != 0) CHECK(text[d.id].find("eab") == std::string::npos);
    }
  }
  REQUIRE(done.size() == 24);
  for (const auto& c : done) {
    CHECK(finals[c.id] == 1);
    CHECK(tokens[c.id] == c.tokens);
    CHECK(text[c.id] == c.text);
    CHECK(logprobs[c.id] == c.logprobs);
    CHECK(c.logprobs.size() == (c.id % 2 == 0 ? c.tokens.size() : 0));
    for (const double l : c.logprobs) CHECK((l <= 0 && l > -50));
    cut += c.finish == loom::FinishReason::kStop;
  }
  CHECK(cut > 0);
}

TEST_CASE("engine: prefix caching shares the blocks of identical prefixes and changes no output", "[serve]") {
  // Prompts that share a 13-token start (a system prompt) and some that repeat whole; a pool so small (kv_blocks)
  // that cached blocks are evicted and sequences preempted; greedy and sampled outputs equal those without sharing.
  std::mt19937 rng(17);
  const auto system = random_tokens(rng, 13);
  std::vector<loom::GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) {
    loom::GenerationRequest r;
    r.prompt = system;
    const auto tail = random_tokens(rng, i % 4 == 3 ? 0 : 1 + i % 9);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    if (i % 5 == 4) r.prompt = requests[static_cast<size_t>(i - 2)].prompt;  // the same prompt again
    r.max_tokens = 3 + i % 6;
    r.sampling.temperature = i % 2 ? 1.0 : 0.0;
    r.sampling.seed = static_cast<uint64_t>(i);
    requests.push_back(r);
  }
  for (const int64_t kv_blocks : {64, 18}) {
    std::map<bool, std::vector<loom::Completion>> out;
    std::map<bool, loom::EngineStats> stats;
    for (const bool caching : {false, true}) {
      auto gpt = engine_test_gpt(loom::PositionKind::kRope, 2, 0, 32);
      loom::EngineOptions options;
      options.block_size = 4;
      options.kv_blocks = kv_blocks;
      options.max_batch = 6;
      options.prefix_caching = caching;
      loom::Engine engine(gpt, options);
      // In waves, so later requests find what earlier ones filed.
      std::vector<loom::Completion> done;
      for (size_t i = 0; i < requests.size(); ++i) {
        engine.add(requests[i]);
        if (i % 3 == 2)
          for (auto& c : engine.step()) done.push_back(std::move(c));
      }
      for (auto& c : engine.run()) done.push_back(std::move(c));
      std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
      out[caching] = done;
      stats[caching] = engine.stats();
      CHECK(engine.pool().used_blocks() == 0);  // every reference released; cached blocks are evictable
      CHECK(engine.pool().free_blocks() == engine.pool().blocks());
      if (caching) CHECK(engine.pool().cached_blocks() > 0);
    }
    REQUIRE(out[false].size() == requests.size());
    REQUIRE(out[true].size() == requests.size());
    for (size_t i = 0; i < requests.size(); ++i) CHECK(out[true][i].tokens == out[false][i].tokens);
    CHECK(stats[false].prefix_hit_tokens == 0);
    CHECK(stats[true].prefix_hit_tokens >= 8 * 12);  // most requests skip at least the 3 full system blocks
    if (stats[true].preemptions == 0 && stats[false].preemptions == 0)  // every position prefilled or found once
      CHECK(stats[true].prefill_tokens + stats[true].prefix_hit_tokens == stats[false].prefill_tokens);
    CHECK(stats[true].prefill_tokens < stats[false].prefill_tokens);
    if (kv_blocks == 18) CHECK(stats[true].preemptions + stats[false].preemptions > 0);
  }
}

TEST_CASE("KV block pool: shared blocks are counted by reference and evicted least recently released first",
          "[serve]") {
  loom::KVBlockPool pool(1, 4, 2, 1, 1, torch::TensorOptions().dtype(torch::kFloat));
  pool.set_prefix_caching(true);
  const std::vector<int64_t> a{1, 2, 3, 4, 5}, b{1, 2, 3, 9, 9}, c{7, 7, 7};
  loom::BlockTable ta, tb, tc;
  REQUIRE(pool.reserve(ta, 5));
  ta.length = 4;  // positions 0-3 written: two full blocks
  pool.publish(ta, a);
  CHECK(pool.cached_blocks() == 2);
  CHECK(pool.share_prefix(tb, b, 4) == 2);  // the first block (1, 2) matches, the second (3, 4) does not
  CHECK(tb.blocks.front() == ta.blocks.front());
  CHECK(pool.used_blocks() == 3);           // a's three, one of them shared
  pool.release(ta);
  CHECK(pool.used_blocks() == 1);           // b still holds the shared one
  CHECK(pool.free_blocks() == 3);           // one never used, a's (3, 4) cached, a's third free
  pool.release(tb);
  CHECK(pool.used_blocks() == 0);
  CHECK(pool.cached_blocks() == 2);
  REQUIRE(pool.reserve(tc, 8));             // all four: both cached blocks evicted
  CHECK(pool.cached_blocks() == 0);
  loom::BlockTable td;
  CHECK(pool.share_prefix(td, a, 4) == 0);  // forgotten
  pool.release(tc);
  CHECK(pool.free_blocks() == 4);
}

TEST_CASE("engine worker: requests from many threads get the engine's own outputs, cancel and close free every block",
          "[serve]") {
  auto gpt = engine_test_gpt(loom::PositionKind::kRope, 2, 0, 32);
  std::mt19937 rng(23);
  std::vector<loom::GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) {
    loom::GenerationRequest r;
    r.prompt = random_tokens(rng, 1 + i % 11);
    r.max_tokens = 2 + i % 7;
    r.sampling.temperature = i % 3 ? 1.0 : 0.0;
    r.sampling.seed = static_cast<uint64_t>(i);
    requests.push_back(r);
  }
  loom::EngineOptions options;
  options.block_size = 4;
  options.kv_blocks = 40;
  options.max_batch = 8;
  std::vector<loom::Completion> alone;
  {
    loom::Engine engine(gpt, options);
    for (const auto& r : requests) engine.add(r);
    alone = engine.run();
  }
  loom::Engine engine(gpt, options);
  std::vector<std::vector<int64_t>> got(requests.size());
  std::vector<std::vector<int64_t>> streamed(requests.size());
  std::vector<std::string> errors(requests.size());
  {
    loom::EngineWorker worker(engine);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i)
      threads.emplace_back([&, i] {
        const bool streaming = i % 2 == 0;
        auto job = worker.submit(requests[i], streaming);
        std::vector<loom::TextDelta> deltas;
        std::optional<loom::Completion> done;
        std::string error;
        while (!worker.wait(*job, deltas, done, error, std::chrono::milliseconds(50))) {
        }
        errors[i] = error;  // Catch2's assertions are for the main thread
        if (done) got[i] = done->tokens;
        for (const auto& d : deltas) streamed[i].insert(streamed[i].end(), d.tokens.begin(), d.tokens.end());
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < requests.size(); ++i) {
      CHECK(errors[i].empty());
      CHECK(got[i] == alone[i].tokens);
      if (i % 2 == 0) CHECK(streamed[i] == got[i]);
      else CHECK(streamed[i].empty());  // a non-streaming waiter is woken at the end only
    }
    // A long request cancelled, then one left running when the worker closes: both end cancelled, no block held.
    auto long_request = requests[0];
    long_request.max_tokens = 1000;
    auto cancelled = worker.submit(long_request, true);
    std::vector<loom::TextDelta> deltas;
    std::optional<loom::Completion> done;
    std::string error;
    worker.cancel(cancelled);  // at once: it cannot have generated its ~30 tokens yet
    while (!worker.wait(*cancelled, deltas, done, error, std::chrono::milliseconds(50))) {
    }
    CHECK((done && done->finish == loom::FinishReason::kCancelled));
    auto closing = worker.submit(long_request, false);
    worker.close();
    done.reset();
    while (!worker.wait(*closing, deltas, done, error, std::chrono::milliseconds(50))) {
    }
    CHECK(((done && done->finish == loom::FinishReason::kCancelled) || !error.empty()));
    CHECK_FALSE(worker.submit(requests[0], false)->error.empty());  // refused after close
    const auto m = worker.metrics();
    CHECK(m.requests == static_cast<int64_t>(requests.size()) + 2);
    CHECK(m.ttft.count >= static_cast<int64_t>(requests.size()));
    CHECK(m.finished.at("cancelled") >= 1);
    int64_t tokens = 0;
    for (const auto& c : alone) tokens += static_cast<int64_t>(c.tokens.size());
    CHECK(m.generated_tokens >= tokens);
  }
  CHECK(engine.idle());
  CHECK(engine.pool().used_blocks() == 0);
}
