// T5's span corruption (data/pairs/span_corruption.h): the source and target rebuild the window exactly, the
// noise is round(15%) of every window in round(noise / 3) spans with sentinels counting down from the top of
// the vocabulary, noise falls on the window's positions as T5's procedure puts it, and the pairs are a pure function of (seed,
// step, window index).
#include <cmath>

#include "data/pairs/span_corruption.h"
#include "test_util.h"

namespace {

// The window back from a pair: each sentinel of the source replaced by the target's span after it.
std::vector<int64_t> rebuild(const loom::TokenPair& pair, int64_t vocab, int64_t* spans, std::vector<int64_t>* noise) {
  std::vector<int64_t> out;
  size_t at = 0;  // in the target
  *spans = 0;
  for (const int64_t token : pair.first) {
    if (token < vocab - 100) {
      out.push_back(token);
      continue;
    }
    CHECK(token == vocab - 1 - *spans);  // sentinels in order
    REQUIRE(pair.second.at(at) == token);
    ++at;
    ++*spans;
    while (at < pair.second.size() && pair.second[at] < vocab - 100) {
      noise->push_back(static_cast<int64_t>(out.size()));
      out.push_back(pair.second[at++]);
    }
  }
  CHECK(at == pair.second.size());
  return out;
}

}  // namespace

TEST_CASE("span corruption: 15% noise in spans of mean 3, sentinels, a pure function of seed, step and index",
          "[t5][data]") {
  loom::SpanCorruptionOptions options;
  options.vocab_size = 5000;
  options.seed = 9;
  const int64_t L = 100;
  std::vector<int64_t> window(L);
  for (int64_t i = 0; i < L; ++i) window[static_cast<size_t>(i)] = 10 + (i * 37) % 1000;
  CHECK(loom::noise_tokens_and_spans(L, options) == std::make_pair<int64_t, int64_t>(15, 5));
  CHECK(loom::noise_tokens_and_spans(1000, options) == std::make_pair<int64_t, int64_t>(150, 50));  // mean span 3
  CHECK(loom::noise_tokens_and_spans(128, options) == std::make_pair<int64_t, int64_t>(19, 6));
  std::vector<double> noise_at(L, 0.0);
  const int64_t windows = 4000;
  for (int64_t index = 0; index < windows; ++index) {
    const auto pair = loom::corrupt_spans(window, options, 3, index);
    int64_t spans = 0;
    std::vector<int64_t> noise;
    CHECK(rebuild(pair, options.vocab_size, &spans, &noise) == window);
    CHECK(spans == 5);
    CHECK(noise.size() == 15);
    CHECK(pair.first.size() == static_cast<size_t>(L - 15 + 5));
    CHECK(pair.second.size() == static_cast<size_t>(15 + 5));
    for (const int64_t i : noise) noise_at[static_cast<size_t>(i)] += 1.0 / windows;
  }
  // A window starts with kept tokens and ends in noise, as T5's; in between each position is noise at the
  // rate of T5's own random_spans_noise_mask (numpy, 20000 windows of 100: 0.123 to 0.133 over positions
  // 10 to 85, rising to 1 at the end).
  CHECK(noise_at[0] == 0.0);
  CHECK(std::abs(noise_at[L - 1] - 1.0) < 1e-9);  // every window (a sum of 4000 x 1/4000)
  double worst = 0;
  for (int64_t i = 10; i <= 85; ++i) worst = std::max(worst, std::abs(noise_at[static_cast<size_t>(i)] - 0.128));
  INFO("noise rate: " << noise_at[10] << " at 10, " << noise_at[50] << " at 50, " << noise_at[85] << " at 85");
  CHECK(worst < 0.02);  // 4000 windows: a rate's standard deviation is 0.005
  // Pure: the same key gives the same pair; another step, index or seed another one.
  const auto a = loom::corrupt_spans(window, options, 3, 17);
  CHECK(loom::corrupt_spans(window, options, 3, 17) == a);
  CHECK(loom::corrupt_spans(window, options, 4, 17) != a);
  CHECK(loom::corrupt_spans(window, options, 3, 18) != a);
  options.seed = 10;
  CHECK(loom::corrupt_spans(window, options, 3, 17) != a);
}
