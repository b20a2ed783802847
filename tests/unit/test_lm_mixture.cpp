// Training on prepared directories and mixtures: a TokenCorpus over a directory's shards numbers windows
// across them and keeps each inside one shard; an LmMixture draws each source at its weight (within 1%
// over 10,000 sequences), stays a pure function of (seed, step, index) (so DP slices and resume are
// exact), with one source equals the plain sampler, and counts tokens per source.
#include <set>

#include "core/error.h"
#include "data/corpus/lm_mixture.h"
#include "data/prepare/prepared_manifest.h"
#include "data/corpus/token_corpus.h"
#include "data/corpus/token_file.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

// A hand-made prepared directory: shard k of `split` holds sizes[k] tokens counting up from `base` + the
// shard's first global position, so every window shows where it starts.
fs::path prepared_dir(const std::string& name, const std::vector<int64_t>& sizes, int64_t base = 0) {
  const auto dir = loom::test::scratch_dir(name);
  const int64_t vocab = 1 << 16;
  loom::PreparedManifest m;
  m.tokenizer = {"tok.model", 77, vocab, 2, false};
  m.options = nlohmann::json::object();
  int64_t next = base;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < sizes[k]; ++i) tokens.push_back(static_cast<int32_t>(next++ % vocab));
    const std::string file = loom::ShardWriter::shard_name("train", k, "bin");
    loom::write_token_file(dir / file, tokens, vocab, 77);
    const loom::TokenFile written(dir / file);
    m.splits[0].shards.push_back({file, "unused.idx", sizes[k], 1, written.data_crc(), "", 0});
    m.splits[0].tokens += sizes[k];
  }
  loom::write_prepared_manifest(dir, m);
  return dir;
}

std::vector<loom::LmSource> sources(const std::vector<std::pair<fs::path, double>>& paths) {
  std::vector<loom::LmSource> out;
  for (const auto& [path, weight] : paths)
    out.push_back({path.string(), weight, std::make_unique<loom::TokenCorpus>(path, "train")});
  return out;
}

}  // namespace

TEST_CASE("token corpus: a prepared split's windows are numbered across its shards, each inside one", "[data]") {
  const auto dir = prepared_dir("corpus-shards", {50, 7, 30});  // 7 tokens: no window of 8 + 1 fits
  const loom::TokenCorpus corpus(dir, "train");
  CHECK(corpus.tokens() == 87);
  const int64_t T = 8;
  REQUIRE(corpus.window_starts(T) == (50 - 8) + 0 + (30 - 8));
  // Window w: starts w in shard 0, then (w - 42) in shard 2, which begins at global token 57.
  for (int64_t w = 0; w < corpus.window_starts(T); ++w) {
    const int64_t first = w < 42 ? w : 57 + (w - 42);
    CHECK(corpus.window(w, T).tokens.equal(torch::arange(first, first + T + 1, torch::kLong)));
  }
  REQUIRE(corpus.eval_windows(T) == (49 / 8) + 0 + (29 / 8));
  CHECK(corpus.eval_window(6, T).tokens.equal(torch::arange(57, 57 + T + 1, torch::kLong)));
  CHECK_THROWS_WITH(loom::TokenCorpus(dir, "valid"), Catch::Contains("has no valid documents"));
  CHECK_THROWS_WITH(loom::TokenCorpus(dir, "test"), Catch::Contains("holds a train and a valid split"));
  fs::remove(dir / "manifest.json");
  CHECK_THROWS_WITH(loom::TokenCorpus(dir, "train"), Catch::Contains("not a prepared dataset"));
}

TEST_CASE("token corpus: a shard that is not the one its manifest names is refused", "[data]") {
  const auto dir = prepared_dir("corpus-swapped", {40, 40});
  fs::copy_file(dir / "train-00000.bin", dir / "train-00001.bin", fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(loom::TokenCorpus(dir, "train"), Catch::Contains("train-00001.bin is not the shard its manifest describes"));
}

TEST_CASE("lm mixture: each source's share is within 1% of its weight over 10,000 sequences", "[data]") {
  const auto a = prepared_dir("mix-a", {500}), b = prepared_dir("mix-b", {400}, 10000), c = prepared_dir("mix-c", {300}, 20000);
  const std::vector<double> weights = {0.6, 0.3, 0.1};
  const int64_t batch = 32, steps = 10000 / batch + 1;  // 10,016 sequences
  for (uint64_t seed : {1ull, 1234ull}) {
    const loom::LmMixture mix(sources({{a, 6.0}, {b, 3.0}, {c, 1.0}}), loom::LmSampler(seed, 16), batch);
    std::vector<int64_t> counts(3, 0);
    std::vector<int64_t> tokens(3, 0);
    for (int64_t step = 0; step < steps; ++step) {
      for (int64_t i = 0; i < batch; ++i) counts[mix.source_of(step, i)] += 1;
      const auto t = mix.source_tokens(step);
      for (size_t s = 0; s < 3; ++s) tokens[s] += t[s];
    }
    for (size_t s = 0; s < 3; ++s) {
      const double share = static_cast<double>(counts[s]) / static_cast<double>(steps * batch);
      INFO("seed " << seed << " source " << s << " share " << share);
      CHECK(std::abs(share - weights[s]) < 0.01);
      CHECK(tokens[s] == counts[s] * 16);
    }
    // Consecutive runs of 1,000 sequences hold the shares as well (an even fill, not luck over the total).
    for (int64_t begin = 0; begin + 1000 <= steps * batch; begin += 1000) {
      int64_t first = 0;
      for (int64_t n = begin; n < begin + 1000; ++n) first += mix.source_of(n / batch, n % batch) == 0;
      CHECK(std::abs(static_cast<double>(first) / 1000 - 0.6) < 0.01);
    }
  }
}

TEST_CASE("lm mixture: windows come from their source, a pure function of (seed, step, index)", "[data]") {
  const auto a = prepared_dir("mix-pure-a", {300}), b = prepared_dir("mix-pure-b", {300}, 30000);
  const int64_t T = 8, batch = 16;
  const loom::LmMixture mix(sources({{a, 1.0}, {b, 1.0}}), loom::LmSampler(5, T), batch);
  const loom::LmSampler plain(5, T);
  for (int64_t step : {0, 1, 7}) {
    const auto whole = mix.train_batch(step, 0, batch);
    for (int64_t i = 0; i < batch; ++i) {
      const auto& corpus = *mix.sources()[mix.source_of(step, i)].corpus;
      const int64_t w = plain.window_start(corpus, step, i);
      CHECK(whole.inputs[i].equal(corpus.window(w, T).tokens.slice(0, 0, T)));
      CHECK((whole.inputs[i][0].item<int64_t>() >= 30000) == (mix.source_of(step, i) == 1));
    }
    // Any slice of the global batch (a DP rank's) is those rows of it, recomputed from nothing.
    const loom::LmMixture again(sources({{a, 1.0}, {b, 1.0}}), loom::LmSampler(5, T), batch);
    using torch::indexing::Slice;
    CHECK(again.train_batch(step, 5, 6).inputs.equal(whole.inputs.index({Slice(5, 11)})));
    CHECK(again.train_batch(step, 5, 6).targets.equal(whole.targets.index({Slice(5, 11)})));
  }
  CHECK(mix.source_names() == std::vector<std::string>{a.string(), b.string()});
  // One source: exactly the plain sampler's batches, and no per-source counts.
  const loom::LmMixture one(sources({{a, 1.0}}), loom::LmSampler(5, T), batch);
  const loom::TokenCorpus corpus(a, "train");
  CHECK(one.train_batch(3, 0, batch).inputs.equal(plain.train_batch(corpus, 3, 0, batch).inputs));
  CHECK(one.source_names().empty());
  CHECK(one.source_tokens(3).empty());
}
