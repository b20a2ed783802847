// The engine serving an encoder-decoder (serve/served_model.h): sources of different lengths decoded together in
// ragged batches (each row's cross-attention over its own source, padded and masked to the batch's longest; the
// self-attention through the paged cache at each row's own position), with a pool so small that sequences are
// preempted and recomputed, give each source the greedy translation of decoding it alone (models/beam_search.h,
// contiguous cache, beam 1): for sinusoidal, learned, relative (T5) and rotary positions. A sampled translation
// (its seed, top-k, logprobs) is the same in a batch with preemptions as decoded alone. The padded stacking's
// mask is checked by hand; prefix caching is refused.
#include <set>

#include "data/pairs/seq2seq_batch.h"
#include "models/beam_search.h"
#include "serve/engine.h"
#include "serve/served_model.h"
#include "test_util.h"

namespace {

loom::EncoderDecoder served_test_model(const std::string& position, const std::string& norm) {
  auto config = loom::parse_config("", "served", {"model.arch=transformer", "model.vocab_size=24", "model.d_model=32",
                                                  "model.n_layers=2", "model.n_heads=4", "model.max_seq_len=32",
                                                  "data.seq_len=32", "model.dropout=0", "model.norm_position=" + norm,
                                                  "model.position=" + position, "model.scale_embeddings=true",
                                                  "model.tie_embeddings=false"});
  loom::EncoderDecoder model(config.model);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.3);
  model->to(torch::kDouble);
  return model;
}

}  // namespace

TEST_CASE("served encoder-decoder: stack_padded pads each row to the longest and masks the padding",
          "[serve][seq2seq]") {
  const auto a = torch::ones({1, 2, 3, 4}), b = torch::full({1, 2, 5, 4}, 2.0);
  torch::Tensor padding;
  const auto stacked = loom::stack_padded({a, b}, 2, &padding);
  REQUIRE(stacked.sizes() == torch::IntArrayRef({2, 2, 5, 4}));
  CHECK(stacked[0].narrow(1, 0, 3).eq(1).all().item<bool>());
  CHECK(stacked[0].narrow(1, 3, 2).eq(0).all().item<bool>());
  CHECK(stacked[1].eq(2).all().item<bool>());
  CHECK(torch::equal(padding, torch::tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, torch::kBool).view({2, 5})));
}

TEST_CASE("served encoder-decoder: continuous batching with preemption gives each source's greedy translation",
          "[serve][seq2seq]") {
  torch::NoGradGuard no_grad;
  const auto [position, norm] = GENERATE(std::make_pair("sinusoidal", "post"), std::make_pair("learned", "pre"),
                                         std::make_pair("relative", "pre"), std::make_pair("rope", "pre"));
  INFO("model.position=" << position << ", model.norm_position=" << norm);
  torch::manual_seed(43);
  auto model = served_test_model(position, norm);
  std::vector<std::vector<int64_t>> sources;
  for (int64_t n : {7, 1, 13, 4, 2, 9, 5, 11, 3, 12}) {
    const auto ids = torch::randint(3, 24, {n}, torch::kLong);
    sources.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + n);
  }
  loom::BeamOptions greedy;
  greedy.decode.beam = 1;
  greedy.decode.max_len_a = 1.5;
  greedy.decode.max_len_b = 4;
  greedy.bos = loom::kBosId;
  greedy.eos = loom::kEosId;

  loom::EngineOptions options;
  options.block_size = 2;
  options.kv_blocks = 24;  // 48 positions for 10 sequences of up to 24: some are preempted and recomputed
  options.max_batch = 10;
  loom::Engine engine(loom::served_encoder_decoder(model, loom::kBosId), options);
  for (const auto& source : sources) {
    loom::GenerationRequest request;
    request.prompt = source;
    request.sampling.temperature = 0;
    request.stop_token = loom::kEosId;
    const auto n = static_cast<double>(source.size());
    request.max_tokens = std::min<int64_t>(static_cast<int64_t>(1.5 * n) + 4, 31);
    engine.add(request);
  }
  std::vector<loom::Completion> done;
  while (!engine.idle()) {
    for (auto& c : engine.step()) done.push_back(std::move(c));
    REQUIRE(engine.audit().empty());
  }
  REQUIRE(done.size() == sources.size());
  CHECK(engine.stats().preemptions > 0);
  CHECK(engine.stats().encoded_sources == static_cast<int64_t>(sources.size()));  // once each, preempted or not
  CHECK(engine.pool().used_blocks() == 0);
  std::set<std::vector<int64_t>> distinct;
  for (const auto& c : done) {
    INFO("source " << c.id << " of " << sources[c.id].size() << " tokens, preempted " << c.preemptions << " times");
    const auto alone = loom::translate(model, {sources[c.id]}, greedy)[0];
    CHECK(c.tokens == alone.tokens);
    distinct.insert(alone.tokens);
  }
  CHECK(distinct.size() >= 5);  // the translations depend on the sources
}

TEST_CASE("served encoder-decoder: a sampled translation depends on its seed, not on its batch", "[serve][seq2seq]") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(44);
  auto model = served_test_model("sinusoidal", "pre");
  std::vector<std::vector<int64_t>> sources;
  for (int64_t n : {6, 12, 3, 9, 1, 14}) {
    const auto ids = torch::randint(3, 24, {n}, torch::kLong);
    sources.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + n);
  }
  const auto run = [&](int64_t max_batch, int64_t kv_blocks) {
    loom::EngineOptions options;
    options.block_size = 2;
    options.kv_blocks = kv_blocks;
    options.max_batch = max_batch;
    loom::Engine engine(loom::served_encoder_decoder(model, loom::kBosId), options);
    for (size_t i = 0; i < sources.size(); ++i) {
      loom::GenerationRequest request;
      request.prompt = sources[i];
      request.sampling.temperature = 1.0;
      request.sampling.top_k = 8;
      request.sampling.seed = 100 + i;
      request.stop_token = loom::kEosId;
      request.max_tokens = 20;
      request.logprobs = true;
      engine.add(request);
    }
    auto done = engine.run();
    return std::make_pair(std::move(done), engine.stats().preemptions);
  };
  const auto [alone, none] = run(1, 64);
  const auto [together, preempted] = run(6, 20);
  CHECK(none == 0);
  CHECK(preempted > 0);
  std::set<std::vector<int64_t>> distinct;
  for (size_t i = 0; i < sources.size(); ++i) {
    INFO("source " << i);
    CHECK(together[i].tokens == alone[i].tokens);
    REQUIRE(together[i].logprobs.size() == alone[i].tokens.size());
    for (size_t j = 0; j < alone[i].logprobs.size(); ++j)
      CHECK_THAT(together[i].logprobs[j], loom::test::close_to(alone[i].logprobs[j], 1e-9, 1e-12));
    distinct.insert(alone[i].tokens);
  }
  CHECK(distinct.size() == sources.size());
}

TEST_CASE("served encoder-decoder: prefix caching is refused, naming the flag", "[serve][seq2seq]") {
  auto model = served_test_model("sinusoidal", "post");
  loom::EngineOptions options;
  options.prefix_caching = true;
  const auto message =
      loom::test::message_of([&] { loom::Engine engine(loom::served_encoder_decoder(model, loom::kBosId), options); });
  CHECK_THAT(message, Catch::Matchers::Contains("--prefix-caching"));
}
