// Pair files (round trip, refusals) and the token-budget PairSampler: determinism, the budget, the
// epoch guarantee, DP slices and the Seq2SeqBatch layout; a weighted mixture of pair files (one file per
// step, each file's batches its own sampler's in order).
#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"
#include "data/corpus/batch_slices.h"
#include "data/corpus/lm_sampler.h"
#include "data/corpus/token_corpus.h"
#include "data/pairs/pair_file.h"
#include "data/pairs/pair_sampler.h"
#include "data/pairs/pair_source.h"
#include "test_util.h"

namespace fs = std::filesystem;
using loom::PairFile;
using loom::PairSampler;
using loom::PairSamplerOptions;

namespace {

constexpr int64_t kVocab = 300;

// `n` pairs of pseudo-random lengths (source 1..40, target about 1.2x it) and ids in [3, kVocab):
// many pairs share their lengths, as verses do.
fs::path make_pairs(const std::string& name, int64_t n, std::vector<std::vector<int32_t>>* sources_out = nullptr,
                    std::vector<std::vector<int32_t>>* targets_out = nullptr, uint64_t salt = 0) {
  std::vector<std::vector<int32_t>> sources, targets;
  uint64_t x = 0x2545F4914F6CDD1Dull ^ salt;
  auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = 1 + static_cast<int64_t>(next() % 40), t = std::max<int64_t>(1, s + static_cast<int64_t>(next() % 9) - 2);
    std::vector<int32_t> src(s), tgt(t);
    for (auto& id : src) id = static_cast<int32_t>(3 + next() % (kVocab - 3));
    for (auto& id : tgt) id = static_cast<int32_t>(3 + next() % (kVocab - 3));
    sources.push_back(src), targets.push_back(tgt);
  }
  const auto path = loom::test::scratch_dir(name) / "pairs.bin";
  loom::write_pair_file(path, sources, targets, kVocab, 1234);
  if (sources_out) *sources_out = sources;
  if (targets_out) *targets_out = targets;
  return path;
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t b, int64_t length) {
  const auto r = t[b].slice(0, 0, length).contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + length};
}

std::vector<int64_t> as_long(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

int64_t padded_tokens(const PairFile& file, const std::vector<int64_t>& pairs) {
  int64_t s = 0, t = 0;
  for (int64_t p : pairs) s = std::max(s, file.source_length(p)), t = std::max(t, file.target_length(p) + 1);
  return static_cast<int64_t>(pairs.size()) * (s + t);
}

}  // namespace

TEST_CASE("pair_file: round trip of sources and targets", "[data][pairs]") {
  std::vector<std::vector<int32_t>> sources, targets;
  const PairFile file(make_pairs("pair-roundtrip", 200, &sources, &targets));
  REQUIRE(file.size() == 200);
  CHECK(file.vocab_size() == kVocab);
  CHECK(file.tokenizer_crc() == 1234);
  for (int64_t i = 0; i < file.size(); ++i) {
    CHECK(file.source_length(i) == static_cast<int64_t>(sources[i].size()));
    CHECK(file.target_length(i) == static_cast<int64_t>(targets[i].size()));
    const auto s = file.source(i), t = file.target(i);
    CHECK(std::vector<int64_t>(s.data_ptr<int64_t>(), s.data_ptr<int64_t>() + s.numel()) == as_long(sources[i]));
    CHECK(std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()) == as_long(targets[i]));
  }
}

TEST_CASE("pair_file: streams, broken pair structure and empty sides are refused", "[data][pairs]") {
  const auto dir = loom::test::scratch_dir("pair-refused");
  auto message = [](const fs::path& path) -> std::string {
    try {
      PairFile file(path);
    } catch (const loom::Error& e) {
      return e.what();
    }
    return "opened";
  };
  loom::write_token_file(dir / "stream.bin", {5, 6, 2, 7, 2}, kVocab, 0);
  CHECK_THAT(message(dir / "stream.bin"), Catch::Contains("stream.bin holds a token stream, not translation pairs"));
  loom::write_token_file(dir / "odd.bin", {5, 6, 2, 7, 2, 8, 2}, kVocab, 0, loom::TokenLayout::kPairs);
  CHECK_THAT(message(dir / "odd.bin"), Catch::Contains("odd.bin: corrupt pair file"));
  loom::write_token_file(dir / "tail.bin", {5, 2, 7, 2, 9}, kVocab, 0, loom::TokenLayout::kPairs);
  CHECK_THAT(message(dir / "tail.bin"), Catch::Contains("corrupt pair file"));
  CHECK_THROWS_WITH(loom::write_pair_file(dir / "e.bin", {{5}, {}}, {{6}, {7}}, kVocab, 0),
                    Catch::Contains("pair 1 has an empty source"));
  CHECK_THROWS_WITH(loom::write_pair_file(dir / "e.bin", {{5}}, {{6, 2, 7}}, kVocab, 0),
                    Catch::Contains("pair 0 holds EOS"));
  // A language model refuses a pair file.
  loom::write_pair_file(dir / "pairs.bin", {{5, 6}, {7}}, {{8}, {9, 10}}, kVocab, 0);
  CHECK_THROWS_WITH(loom::TokenCorpus(dir / "pairs.bin", "train"), Catch::Contains("holds translation pairs"));
}

TEST_CASE("pair_sampler: batches are laid out as seq2seq_batch.h says", "[data][pairs]") {
  std::vector<std::vector<int32_t>> sources, targets;
  const PairFile file(make_pairs("pair-layout", 300, &sources, &targets));
  const PairSampler sampler(file, {600, 1, 7});
  const auto pairs = sampler.train_pairs(3);
  const auto batch = sampler.train_batch(3, 0, static_cast<int64_t>(pairs.size()));
  const int64_t b = static_cast<int64_t>(pairs.size());
  REQUIRE(batch.source.sizes() == torch::IntArrayRef{b, batch.source_lengths.max().item<int64_t>()});
  REQUIRE(batch.target_inputs.sizes() == torch::IntArrayRef{b, batch.target_lengths.max().item<int64_t>()});
  REQUIRE(batch.target_labels.sizes() == batch.target_inputs.sizes());
  int64_t tokens = 0;
  for (int64_t i = 0; i < b; ++i) {
    const auto& src = sources[pairs[i]];
    const auto& tgt = targets[pairs[i]];
    const int64_t s = static_cast<int64_t>(src.size()), t = static_cast<int64_t>(tgt.size());
    CHECK(batch.source_lengths[i].item<int64_t>() == s);
    CHECK(batch.target_lengths[i].item<int64_t>() == t + 1);
    CHECK(row(batch.source, i, s) == as_long(src));
    CHECK(batch.source[i].slice(0, s).eq(0).all().item<bool>());
    auto inputs = as_long(tgt);
    inputs.insert(inputs.begin(), loom::kBosId);
    CHECK(row(batch.target_inputs, i, t + 1) == inputs);
    CHECK(batch.target_inputs[i].slice(0, t + 1).eq(0).all().item<bool>());
    auto labels = as_long(tgt);
    labels.push_back(loom::kEosId);
    CHECK(row(batch.target_labels, i, t + 1) == labels);
    CHECK(batch.target_labels[i].slice(0, t + 1).eq(loom::kIgnoreLabel).all().item<bool>());
    tokens += t + 1;
  }
  CHECK(batch.loss_tokens() == tokens);
}

TEST_CASE("pair_sampler: the batch of a step is a pure function of (seed, step)", "[data][pairs]") {
  const PairFile file(make_pairs("pair-determinism", 500));
  const PairSampler a(file, {800, 1, 11}), b(file, {800, 1, 11}), other_seed(file, {800, 1, 12});
  const int64_t n = a.batches_per_epoch();
  // b is asked in a scrambled order (a resumed run asks for a late step first); a in order.
  std::vector<int64_t> steps;
  for (int64_t s = 0; s < 3 * n; ++s) steps.push_back(s);
  std::vector<std::vector<int64_t>> from_b(steps.size());
  for (int64_t i = static_cast<int64_t>(steps.size()) - 1; i >= 0; i -= 2) from_b[i] = b.train_pairs(steps[i]);
  for (int64_t i = static_cast<int64_t>(steps.size()) - 2; i >= 0; i -= 2) from_b[i] = b.train_pairs(steps[i]);
  int64_t differs = 0;
  for (int64_t s = 0; s < 3 * n; ++s) {
    CHECK(a.train_pairs(s) == from_b[s]);
    differs += a.train_pairs(s) != other_seed.train_pairs(s);
  }
  CHECK(differs > n);  // another seed orders the batches differently
  // Another epoch: the same batch shapes in another order.
  std::vector<std::vector<int64_t>> epoch0, epoch1;
  for (int64_t s = 0; s < n; ++s) epoch0.push_back(a.train_pairs(s)), epoch1.push_back(a.train_pairs(n + s));
  CHECK(epoch0 != epoch1);
}

TEST_CASE("pair_sampler: token budget, min_pairs and length bucketing", "[data][pairs]") {
  const PairFile file(make_pairs("pair-budget", 1000));
  for (const int64_t min_pairs : {1, 4}) {
    for (const int64_t budget : {50, 400, 2000}) {
      INFO("batch_tokens " << budget << ", min_pairs " << min_pairs);
      const PairSampler sampler(file, {budget, min_pairs, 3});
      int64_t over = 0, padded = 0, real = 0;
      for (int64_t step = 0; step < sampler.batches_per_epoch(); ++step) {
        const auto pairs = sampler.train_pairs(step);
        REQUIRE(static_cast<int64_t>(pairs.size()) >= min_pairs);
        const int64_t tokens = padded_tokens(file, pairs);
        // Over the budget only with min_pairs pairs, or the one batch a short tail was merged into.
        if (tokens > budget) over += static_cast<int64_t>(pairs.size()) == min_pairs ? 0 : 1;
        padded += tokens;
        for (int64_t p : pairs) real += file.source_length(p) + file.target_length(p) + 1;
      }
      CHECK(over <= 1);
      if (budget >= 400) CHECK(static_cast<double>(real) / static_cast<double>(padded) > 0.85);  // bucketing pays
    }
  }
  CHECK_THROWS_AS(PairSampler(file, {0, 1, 0}), loom::ConfigError);
  CHECK_THROWS_AS(PairSampler(file, {100, 1001, 0}), loom::ConfigError);
}

TEST_CASE("pair_sampler: every epoch uses every pair exactly once", "[data][pairs]") {
  const PairFile file(make_pairs("pair-epoch", 777));
  const PairSampler sampler(file, {500, 2, 5});
  const int64_t n = sampler.batches_per_epoch();
  for (const int64_t epoch : {0, 1, 4}) {
    std::vector<int64_t> seen;
    for (int64_t s = epoch * n; s < (epoch + 1) * n; ++s) {
      const auto pairs = sampler.train_pairs(s);
      seen.insert(seen.end(), pairs.begin(), pairs.end());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(file.size());
    std::iota(all.begin(), all.end(), 0);
    CHECK(seen == all);
  }
  // Evaluation: a fixed order covering the file once.
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < sampler.eval_batches(); ++b) {
    const auto pairs = sampler.eval_pairs(b);
    seen.insert(seen.end(), pairs.begin(), pairs.end());
    CHECK(pairs == PairSampler(file, {500, 2, 99}).eval_pairs(b));  // no seed in it
  }
  std::set<int64_t> unique(seen.begin(), seen.end());
  CHECK(seen.size() == static_cast<size_t>(file.size()));
  CHECK(unique.size() == static_cast<size_t>(file.size()));
}

TEST_CASE("pair_sampler: DP slices partition the global batch", "[data][pairs]") {
  const PairFile file(make_pairs("pair-dp", 400));
  const PairSampler sampler(file, {700, 3, 21});
  CHECK(loom::slice_range(10, 3, 0) == std::make_pair<int64_t, int64_t>(0, 4));
  CHECK(loom::slice_range(10, 3, 1) == std::make_pair<int64_t, int64_t>(4, 7));
  CHECK(loom::slice_range(10, 3, 2) == std::make_pair<int64_t, int64_t>(7, 10));
  for (int64_t step : {0, 5, 17}) {
    const auto pairs = sampler.train_pairs(step);
    const auto whole = make_pair_batch(file, pairs);
    const int64_t b = static_cast<int64_t>(pairs.size());
    int64_t next = 0, target_tokens = 0;
    for (int64_t rank = 0; rank < 3; ++rank) {
      const auto [begin, end] = loom::slice_range(b, 3, rank);
      CHECK(begin == next);
      REQUIRE(end > begin);  // min_pairs = dp: no rank is left without pairs
      next = end;
      const auto slice = sampler.train_batch(step, begin, end - begin);
      target_tokens += slice.loss_tokens();
      for (int64_t i = 0; i < end - begin; ++i) {
        const int64_t s = slice.source_lengths[i].item<int64_t>(), t = slice.target_lengths[i].item<int64_t>();
        CHECK(s == whole.source_lengths[begin + i].item<int64_t>());
        CHECK(t == whole.target_lengths[begin + i].item<int64_t>());
        CHECK(row(slice.source, i, s) == row(whole.source, begin + i, s));
        CHECK(row(slice.target_labels, i, t) == row(whole.target_labels, begin + i, t));
      }
    }
    CHECK(next == b);
    CHECK(target_tokens == whole.loss_tokens());
  }
}

TEST_CASE("micro_batches: DP ranks then micro-batches, near-equal consecutive slices", "[data][pairs]") {
  // 11 pairs, dp 2, 2 micro-batches: rank 0 takes [0, 6) as 3 + 3, rank 1 [6, 11) as 3 + 2.
  const auto r0 = loom::micro_batches(11, 2, 0, 2), r1 = loom::micro_batches(11, 2, 1, 2);
  REQUIRE(r0.size() == 2);
  REQUIRE(r1.size() == 2);
  CHECK((r0[0].first == 0 && r0[0].count == 3 && r0[1].first == 3 && r0[1].count == 3));
  CHECK((r1[0].first == 6 && r1[0].count == 3 && r1[1].first == 9 && r1[1].count == 2));
  // Divisible sizes give the fixed-size layout first = (rank * accumulation + m) * micro.
  for (int64_t rank = 0; rank < 4; ++rank)
    for (int64_t m = 0; m < 2; ++m) {
      const auto s = loom::micro_batches(64, 4, rank, 2)[m];
      CHECK(s.first == (rank * 2 + m) * 8);
      CHECK(s.count == 8);
    }
}

TEST_CASE("pair mixture: each step's batch comes from one file by weight, each file's batches in its own order",
          "[data][pairs]") {
  const PairSamplerOptions options{500, 1, 7};
  const auto path_a = make_pairs("mix-a", 300, nullptr, nullptr, 1), path_b = make_pairs("mix-b", 200, nullptr, nullptr, 2);
  auto mixture = [&] {
    std::vector<loom::TrainPairs> train;
    train.push_back({"a", 3.0, std::make_unique<PairFile>(path_a)});
    train.push_back({"b", 1.0, std::make_unique<PairFile>(path_b)});
    return loom::PairFileSource(std::move(train), nullptr, options, 64);
  };
  const auto source = mixture();
  CHECK(source.source_names() == std::vector<std::string>{"a", "b"});
  const PairFile a(path_a), b(path_b);
  const PairSampler samplers[] = {PairSampler(a, options), PairSampler(b, options)};
  // The k-th step that draws a file is that file's sampler step k: the same pairs, so every file keeps its
  // sampler's epoch guarantee; the step's tokens count for its file only.
  const int64_t steps = 400;
  std::vector<int64_t> uses(2, 0);
  std::vector<std::pair<size_t, int64_t>> drawn;
  for (int64_t step = 0; step < steps; ++step) {
    const auto [file, at] = source.file_step(step);
    drawn.emplace_back(file, at);
    INFO("step " << step);
    REQUIRE(file < 2);
    CHECK(at == uses[file]++);
    const auto& sampler = samplers[file];
    const int64_t n = static_cast<int64_t>(sampler.train_pairs(at).size());
    CHECK(source.train_batch_size(step) == n);
    const auto got = source.train_batch(step, 0, n), expected = sampler.train_batch(at, 0, n);
    CHECK(torch::equal(got.source, expected.source));
    CHECK(torch::equal(got.target_labels, expected.target_labels));
    const auto tokens = source.source_tokens(step);
    CHECK(tokens[file] == expected.tokens());
    CHECK(tokens[1 - file] == 0);
  }
  // Weights 3 : 1 over 400 steps: the Weyl draws take file a's share to within a few steps of 300.
  INFO("file a drew " << uses[0] << " of " << steps << " steps");
  CHECK(std::abs(uses[0] - 300) <= 4);
  // A pure function of the step: a fresh source asked for a late step first (a resumed run), then an early
  // one, draws as the one that went through every step.
  const auto fresh = mixture();
  for (const int64_t step : {350, 399, 10, 0, 200}) CHECK(fresh.file_step(step) == drawn[step]);
  // One file: its sampler's steps as they are, no names, no per-source counts.
  std::vector<loom::TrainPairs> one;
  one.push_back({"a", 1.0, std::make_unique<PairFile>(path_a)});
  const loom::PairFileSource single(std::move(one), nullptr, options, 64);
  CHECK(single.file_step(123) == std::make_pair(size_t{0}, int64_t{123}));
  CHECK(single.source_names().empty());
  CHECK(single.source_tokens(5).empty());
}
