// Greedy and beam search: hand-checkable cases on a next-token table (which hypothesis wins, its
// log-probability, the length penalty, the maximum length), and on a random encoder-decoder: beam 1
// equals greedy, greedy picks the full forward's argmax at every step, the cached search equals the
// uncached one, translations respect max_len_a * source length + max_len_b, and a sentence's translation does
// not depend on the batch it is decoded in.
#include <cmath>
#include <set>

#include "data/pairs/seq2seq_source.h"
#include "data/pairs/synthetic_pairs.h"
#include "models/beam_search.h"
#include "test_util.h"

namespace {

// Vocabulary: 0 pad, 1 bos, 2 eos, 3 "A", 4 "B", 5..9 others. The next token's distribution depends on
// the last token only, as a table: after A, eos 0.3 and 0.14 for each of 5..9; after B, eos 0.9 and 5
// 0.1; after 5..9, eos; after bos, what the case says.
class TableDecoder : public loom::StepDecoder {
 public:
  explicit TableDecoder(const std::vector<std::pair<int64_t, double>>& after_bos) {
    table_ = torch::zeros({10, 10}, torch::kFloat);
    for (auto [token, p] : after_bos) table_[1][token] = p;
    table_[3][2] = 0.3;
    for (int64_t t = 5; t < 10; ++t) table_[3][t] = 0.14;
    table_[4][2] = 0.9;
    table_[4][5] = 0.1;
    for (int64_t t = 5; t < 10; ++t) table_[t][2] = 1.0;
    table_[2][2] = 1.0;  // rows fed after their end
    table_ = table_.log();
  }
  torch::Tensor next_log_probs(const torch::Tensor& tokens) override {
    ++calls;
    return table_.index_select(0, tokens.select(1, tokens.size(1) - 1));
  }
  void select(const torch::Tensor&) override {}  // no state: the table looks at the tokens only
  int64_t calls = 0;

 private:
  torch::Tensor table_;
};

loom::BeamOptions beam(int64_t k, double length_penalty) {
  loom::BeamOptions o;
  o.decode.beam = k;
  o.decode.length_penalty = length_penalty;
  return o;
}

loom::EncoderDecoder random_model() {
  auto config = loom::parse_config("", "beam", {"model.arch=transformer", "model.vocab_size=24", "model.d_model=32",
                                                "model.n_layers=2", "model.n_heads=4", "model.max_seq_len=32",
                                                "data.seq_len=32", "model.dropout=0", "model.norm_position=post",
                                                "model.position=sinusoidal", "model.scale_embeddings=true",
                                                "model.tie_embeddings=false"});
  loom::EncoderDecoder model(config.model);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.3);
  // Every logit but eos's shrunk, so that eos wins at about every other position and hypotheses end at
  // different lengths before the maximum; the other tokens keep their order.
  auto head = model->named_parameters()["lm_head.weight"];
  head.narrow(0, 3, head.size(0) - 3).mul_(0.1);
  return model;
}

}  // namespace

TEST_CASE("beam search: a wider beam finds the likelier translation that greedy misses", "[decode]") {
  TableDecoder table({{3, 0.6}, {4, 0.4}});
  const auto greedy = loom::greedy_search(table, {10}, beam(1, 0));
  REQUIRE(greedy.size() == 1);
  CHECK(greedy[0].tokens == std::vector<int64_t>{3});        // A (0.6), then eos (0.3): 0.18
  CHECK(greedy[0].log_prob == Approx(std::log(0.18)));
  const auto wide = loom::beam_search(table, {10}, beam(2, 0));
  CHECK(wide[0].tokens == std::vector<int64_t>{4});          // B (0.4), then eos (0.9): 0.36
  CHECK(wide[0].log_prob == Approx(std::log(0.36)));
  CHECK(wide[0].score == Approx(std::log(0.36)));
  // Both endings were among the best two candidates of step 2: the search stopped there.
  CHECK(table.calls == 2 + 2);
  // Beam 1 is greedy.
  const auto one = loom::beam_search(table, {10}, beam(1, 0));
  CHECK(one[0].tokens == greedy[0].tokens);
  CHECK(one[0].log_prob == Approx(greedy[0].log_prob));
}

TEST_CASE("beam search: the length penalty divides by length^penalty", "[decode]") {
  // After bos: eos 0.5, A 0.3, B 0.2. Finished: [] (log 0.5, length 1), [B] (log 0.18, length 2),
  // [A] (log 0.09, length 2).
  TableDecoder table({{2, 0.5}, {3, 0.3}, {4, 0.2}});
  CHECK(loom::beam_search(table, {10}, beam(2, 0))[0].tokens.empty());
  CHECK(loom::beam_search(table, {10}, beam(2, 1))[0].tokens.empty());  // -0.69 against log(0.18) / 2 = -0.86
  const auto long_favoured = loom::beam_search(table, {10}, beam(2, 2));  // log(0.18) / 4 = -0.43
  CHECK(long_favoured[0].tokens == std::vector<int64_t>{4});
  CHECK(long_favoured[0].score == Approx(std::log(0.18) / 4));
}

TEST_CASE("beam search: eos is forced at the maximum length", "[decode]") {
  TableDecoder table({{3, 0.6}, {4, 0.4}});
  // Max length 1: after A or B the only choice is eos (with its table probability).
  CHECK(loom::greedy_search(table, {1}, beam(1, 0))[0].tokens == std::vector<int64_t>{3});
  // After bos with A 0.6 / B 0.4 and lengths 0 and 2 in one batch.
  TableDecoder mixed({{2, 0.5}, {3, 0.3}, {4, 0.2}});
  const auto batch = loom::beam_search(mixed, {0, 2}, beam(2, 0));
  CHECK(batch[0].tokens.empty());
  CHECK(batch[0].log_prob == Approx(std::log(0.5)));
  CHECK(batch[1].tokens.empty());
}

TEST_CASE("beam search: on a model, beam 1 is greedy and greedy is the full forward's argmax", "[decode][seq2seq]") {
  torch::manual_seed(41);
  auto model = random_model();
  model->eval();
  const std::vector<std::vector<int64_t>> sources = {{5, 6, 7, 8, 9, 10}, {11, 12}, {}, {13, 14, 15, 16}};
  auto greedy_options = beam(1, 1.0);
  const auto greedy = loom::translate(model, sources, greedy_options);
  CHECK(greedy[2].tokens.empty());  // an empty source: nothing to attend to, an empty translation
  // beam_search with k = 1 (translate picks greedy_search for beam 1, so call it directly)
  std::vector<std::vector<int64_t>> nonempty = {sources[0], sources[1], sources[3]};
  auto source = torch::zeros({3, 6}, torch::kLong);
  std::vector<int64_t> lengths, max_lengths;
  for (int64_t b = 0; b < 3; ++b) {
    const auto& s = nonempty[b];
    source[b].narrow(0, 0, static_cast<int64_t>(s.size())).copy_(torch::tensor(s, torch::kLong));
    lengths.push_back(static_cast<int64_t>(s.size()));
    max_lengths.push_back(static_cast<int64_t>(1.5 * static_cast<double>(s.size())) + 10);
  }
  torch::NoGradGuard no_grad;
  loom::ModelStepDecoder decoder(model, source, torch::tensor(lengths, torch::kLong), true);
  const auto one = loom::beam_search(decoder, max_lengths, beam(1, 1.0));
  int64_t ended_early = 0;
  for (int64_t b = 0; b < 3; ++b) {
    const auto& g = greedy[b == 2 ? 3 : b];
    INFO("sentence " << b);
    CHECK(one[b].tokens == g.tokens);
    CHECK(one[b].log_prob == Approx(g.log_prob).epsilon(1e-5));
    CHECK(static_cast<int64_t>(g.tokens.size()) <= max_lengths[b]);
    ended_early += static_cast<int64_t>(g.tokens.size()) < max_lengths[b] ? 1 : 0;
    // Every token is the argmax of the full (uncached) forward given the prefix, and eos ends it.
    std::vector<int64_t> prefix = {1};
    const auto src = source.narrow(0, b, 1);
    const auto len = torch::tensor({lengths[b]}, torch::kLong);
    double log_prob = 0;
    for (size_t i = 0; i <= g.tokens.size(); ++i) {
      const auto logits = model->forward(src, len, torch::tensor(prefix, torch::kLong).unsqueeze(0))[0][-1];
      const int64_t expected = i < g.tokens.size() ? g.tokens[i] : 2;
      if (i < g.tokens.size() || static_cast<int64_t>(i) < max_lengths[b]) CHECK(logits.argmax().item<int64_t>() == expected);
      log_prob += torch::log_softmax(logits, -1)[expected].item<double>();
      prefix.push_back(expected);
    }
    CHECK(g.log_prob == Approx(log_prob).epsilon(1e-4));
  }
  CHECK(ended_early >= 1);  // eos was chosen, not only forced
}

TEST_CASE("beam search: cached and uncached searches agree", "[decode][seq2seq][cache]") {
  torch::manual_seed(42);
  auto model = random_model();
  const std::vector<std::vector<int64_t>> sources = {{5, 6, 7, 8, 9, 10, 3}, {11, 12}, {13, 14, 15, 16}, {17}};
  for (int64_t k : {1, 4}) {
    INFO("beam " << k);
    auto options = beam(k, 0.6);
    options.decode.max_len_a = 1.0;
    options.decode.max_len_b = 3;
    const auto cached = loom::translate(model, sources, options);
    options.use_cache = false;
    const auto uncached = loom::translate(model, sources, options);
    for (size_t b = 0; b < sources.size(); ++b) {
      CHECK(cached[b].tokens == uncached[b].tokens);
      CHECK(cached[b].score == Approx(uncached[b].score).epsilon(1e-5));
      CHECK(static_cast<int64_t>(cached[b].tokens.size()) <= static_cast<int64_t>(sources[b].size()) + 3);
    }
  }
  // The beam's best is at least as likely (under its ranking) as greedy's, up to rounding: where both find the
  // same translation, the two searches batch its steps differently (4 rows a sentence or 1), and each of its
  // fp32 log-probabilities (summed in double) may differ in its last bits: 2 ulps of each term in each search
  // bound the difference by 4 eps |score| (|score| is the sum of the terms' magnitudes: they are all <= 0).
  auto options = beam(4, 0.0);
  const auto wide = loom::translate(model, sources, options);
  const auto greedy = loom::translate(model, sources, beam(1, 0.0));
  for (size_t b = 0; b < sources.size(); ++b) {
    const double rounding = 4 * loom::test::kFloatEps * std::abs(greedy[b].score);
    INFO("sentence " << b << ", rounding allowed " << rounding);
    CHECK(wide[b].score >= greedy[b].score - rounding);
  }
}

// What batching may change: ATen's fp32 matrix products give a row other last bits by how many rows are
// multiplied with it (measured here: 1, 2, 3 or 5 rows against 64, up to 3e-6 on outputs of magnitude 5; 4 rows
// equal), and attention over keys padded to the batch's longest source other last bits than over the
// source's own keys (1 to 2 ulps): the same sentence's log-probabilities differ by rounding alone, so its
// translation is the same but where two hypotheses tie to within rounding. Measured on these sentences: the
// same tokens, scores within 7.3 eps |score|.
TEST_CASE("beam search: a sentence's translation does not depend on its batch neighbours", "[decode][seq2seq]") {
  torch::manual_seed(43);
  auto model = random_model();
  // Sources of 1 to 13 tokens: alone (no padding, B = 1), all in one batch (padded to 13), and in batches of 3
  // in another order (loom translate sorts by length, loom eval takes the file's order).
  std::vector<std::vector<int64_t>> sources;
  for (int64_t n : {7, 1, 13, 4, 2, 9, 5, 11, 3}) {
    const auto ids = torch::randint(3, 24, {n}, torch::kLong);
    sources.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + n);
  }
  for (int64_t k : {1, 4}) {
    auto options = beam(k, 1.0);
    options.decode.max_len_a = 1.5;
    options.decode.max_len_b = 4;
    const auto together = loom::translate(model, sources, options);
    std::vector<loom::Hypothesis> in_threes(sources.size());
    const std::vector<size_t> order = {2, 7, 5, 0, 6, 3, 8, 4, 1};
    for (size_t first = 0; first < order.size(); first += 3) {
      std::vector<std::vector<int64_t>> batch;
      for (size_t i = first; i < first + 3; ++i) batch.push_back(sources[order[i]]);
      const auto found = loom::translate(model, batch, options);
      for (size_t i = 0; i < 3; ++i) in_threes[order[first + i]] = found[i];
    }
    std::set<std::vector<int64_t>> distinct;
    for (size_t b = 0; b < sources.size(); ++b) {
      INFO("beam " << k << ", sentence " << b << " of " << sources[b].size() << " tokens");
      const auto alone = loom::translate(model, {sources[b]}, options)[0];
      CHECK(together[b].tokens == alone.tokens);
      CHECK(in_threes[b].tokens == alone.tokens);
      CHECK_THAT(together[b].score, loom::test::close_to(alone.score, 16 * loom::test::kFloatEps));
      CHECK_THAT(in_threes[b].score, loom::test::close_to(alone.score, 16 * loom::test::kFloatEps));
      distinct.insert(alone.tokens);
    }
    CHECK(distinct.size() >= 5);  // the model translates, not one string for every source
  }
}

TEST_CASE("synthetic pairs: deterministic reversals, collated as Seq2SeqBatch says", "[data][seq2seq]") {
  loom::SyntheticOptions options;
  options.task = loom::SyntheticTask::kReverse;
  options.vocab = 12;
  options.min_len = 2;
  options.max_len = 6;
  options.valid_size = 50;
  options.batch_size = 9;
  loom::SyntheticPairs data(options);
  const auto a = data.train_batch(3, 10, 4), b = data.train_batch(3, 10, 4);
  CHECK(torch::equal(a.source, b.source));
  CHECK(!torch::equal(a.source, data.train_batch(4, 10, 4).source));
  // Sequence 11 of step 3 is the same whether fetched in a batch from 10 or alone.
  const auto alone = data.train_batch(3, 11, 1);
  CHECK(torch::equal(alone.source[0].narrow(0, 0, alone.source_lengths[0].item<int64_t>()),
                     a.source[1].narrow(0, 0, alone.source_lengths[0].item<int64_t>())));
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t n = a.source_lengths[i].item<int64_t>();
    CHECK(n >= 2);
    CHECK(n <= 6);
    CHECK(a.target_lengths[i].item<int64_t>() == n + 1);
    CHECK(a.target_inputs[i][0].item<int64_t>() == loom::kBosId);
    CHECK(a.target_labels[i][n].item<int64_t>() == loom::kEosId);
    CHECK(torch::equal(a.target_labels[i].narrow(0, 0, n), a.source[i].narrow(0, 0, n).flip(0)));
    CHECK(torch::equal(a.target_inputs[i].narrow(0, 1, n), a.target_labels[i].narrow(0, 0, n)));
    CHECK((a.source[i].narrow(0, n, a.source.size(1) - n) == 0).all().item<bool>());
    CHECK((a.target_labels[i].narrow(0, n + 1, a.target_labels.size(1) - n - 1) == loom::kIgnoreLabel).all().item<bool>());
    CHECK((a.source[i].narrow(0, 0, n) >= 3).all().item<bool>());
    CHECK((a.source[i] < 12).all().item<bool>());
  }
  CHECK(a.loss_tokens() == (a.source_lengths + 1).sum().item<int64_t>());
  // The evaluation set is fixed and wraps around.
  CHECK(torch::equal(data.eval_batch(50, 2).source, data.eval_batch(0, 2).source));
  CHECK(!torch::equal(data.eval_batch(0, 2).source, data.train_batch(0, 0, 2).source));
}
