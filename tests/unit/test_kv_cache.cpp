// The KV-cache interface (models/kv_cache.h): the contiguous cache's own arithmetic, and a cache stored another
// way behind the same interface giving the contiguous cache's outputs, bit for bit, to the GPT's incremental
// forward and to the encoder-decoder's incremental decoding with beam reordering.
#include <catch2/catch.hpp>

#include <deque>

#include "models/encoder_decoder.h"
#include "models/gpt.h"
#include "models/kv_cache.h"
#include "test_util.h"

using loom::test::perturb;

namespace {

// Keeps each call's keys and values as a chunk of their own and stitches every chunk together on each call:
// nothing like the contiguous cache's one growing tensor, the same keys returned.
class ChunkListCache final : public loom::KVCache {
 public:
  int64_t seen() const override { return seen_; }
  std::pair<torch::Tensor, torch::Tensor> append(const torch::Tensor& k, const torch::Tensor& v) override {
    chunks_.push_back({k.clone(), v.clone()});
    seen_ += k.size(2);
    std::vector<torch::Tensor> keys, values;
    for (const auto& [ck, cv] : chunks_) {
      keys.push_back(ck);
      values.push_back(cv);
    }
    return {torch::cat(keys, 2), torch::cat(values, 2)};
  }
  void select(const torch::Tensor& rows) override {
    for (auto& [ck, cv] : chunks_) {
      ck = ck.index_select(0, rows);
      cv = cv.index_select(0, rows);
    }
  }

 private:
  int64_t seen_ = 0;
  std::deque<std::pair<torch::Tensor, torch::Tensor>> chunks_;
};

std::unique_ptr<loom::KVCache> chunk_list() { return std::make_unique<ChunkListCache>(); }

}  // namespace

TEST_CASE("kv cache: the contiguous cache returns every key, keeps the window, reorders rows", "[models][generate]") {
  loom::ContiguousKVCache cache(/*window=*/3);
  const auto first = torch::arange(2 * 1 * 4 * 2, torch::kFloat).view({2, 1, 4, 2});
  auto [k, v] = cache.append(first, -first);
  CHECK(torch::equal(k, first));  // a prompt longer than the window: its queries see all of it
  CHECK(cache.seen() == 4);
  CHECK(cache.length() == 3);  // the next query needs the last 3
  CHECK(torch::equal(cache.keys(), first.narrow(2, 1, 3)));
  const auto next = torch::full({2, 1, 1, 2}, 100.0f);
  std::tie(k, v) = cache.append(next, next);
  CHECK(torch::equal(k, torch::cat({first.narrow(2, 1, 3), next}, 2)));
  CHECK(torch::equal(v, torch::cat({-first.narrow(2, 1, 3), next}, 2)));
  CHECK(cache.seen() == 5);
  CHECK(cache.length() == 3);
  const auto before = cache.keys();
  cache.select(torch::tensor({1, 1, 0}, torch::kLong));
  REQUIRE(cache.keys().size(0) == 3);
  CHECK(torch::equal(cache.keys()[0], before[1]));
  CHECK(torch::equal(cache.keys()[1], before[1]));
  CHECK(torch::equal(cache.keys()[2], before[0]));
}

TEST_CASE("kv cache: a cache stored another way behind the interface gives the contiguous cache's outputs",
          "[models][generate]") {
  torch::manual_seed(41);
  auto config = loom::test::small_gpt_config(/*vocab_size=*/53, /*d_model=*/32, /*n_layers=*/2, /*n_heads=*/4,
                                             /*max_seq_len=*/32);
  config.n_kv_heads = 2;
  config.position = loom::PositionKind::kRope;
  loom::Gpt gpt(config);
  perturb(*gpt);
  gpt->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 53, {2, 12}, torch::kLong);
  auto contiguous = gpt->new_caches();
  loom::KVCaches chunks(gpt->n_blocks(), chunk_list);
  for (auto [from, to] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 6}, {6, 9}, {9, 10}, {10, 12}}) {
    const auto piece = tokens.narrow(1, from, to - from);
    CHECK(torch::equal(gpt->forward(piece, &chunks), gpt->forward(piece, &contiguous)));
  }
  CHECK(chunks.seen() == 12);

  // The encoder-decoder's self-attention caches, beams reordered between steps.
  auto sets = std::vector<std::string>{"model.arch=transformer", "model.vocab_size=40", "model.d_model=32",
                                       "model.n_layers=2",       "model.n_heads=4",     "model.d_ff=48",
                                       "model.max_seq_len=16",   "model.dropout=0",     "data.seq_len=16"};
  loom::EncoderDecoder model(loom::parse_config("", "test", sets).model);
  perturb(*model);
  model->eval();
  const auto source = torch::randint(3, 40, {2, 6}, torch::kLong);
  const auto lengths = torch::tensor({6, 4}, torch::kLong);
  auto plain = model->start_decoding(source, lengths);
  auto other = model->start_decoding(source, lengths, chunk_list);
  auto target = torch::randint(3, 40, {2, 3}, torch::kLong);
  CHECK(torch::equal(model->decode_step(target, other), model->decode_step(target, plain)));
  const auto rows = torch::tensor({1, 0, 1}, torch::kLong);
  plain.select(rows);
  other.select(rows);
  for (int step = 0; step < 3; ++step) {
    target = torch::randint(3, 40, {3, 1}, torch::kLong);
    CHECK(torch::equal(model->decode_step(target, other), model->decode_step(target, plain)));
  }
  CHECK(other.seen() == 6);
}
