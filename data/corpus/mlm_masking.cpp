#include "data/corpus/mlm_masking.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "data/corpus/splitmix.h"

namespace loom {
namespace {

// A SplitMix64 stream for one sequence: its own seed from (seed, step, index).
class MaskStream {
 public:
  MaskStream(uint64_t seed, int64_t step, int64_t index)
      : state_(splitmix64(splitmix64(splitmix64(seed ^ 0x4d4c4dull) ^ static_cast<uint64_t>(step)) ^
                          static_cast<uint64_t>(index))) {}
  uint64_t next() { return splitmix64(state_ += kSplitMixIncrement); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

// Whole-word masking's choice among the text positions of one window: words in a random order, each taken
// whole while it fits in `chosen` tokens; the chosen positions in `order`'s first entries, their count returned.
int64_t choose_whole_words(const int64_t* tokens, int64_t T, const std::vector<bool>& continues, int64_t chosen,
                           MaskStream& stream, std::vector<int64_t>& order) {
  thread_local std::vector<int64_t> starts;  // each word's first position, then T
  starts.clear();
  for (int64_t t = 0; t < T; ++t) {
    const auto id = static_cast<size_t>(tokens[t]);
    if (t == 0 || id >= continues.size() || !continues[id]) starts.push_back(t);
  }
  const auto words = static_cast<int64_t>(starts.size());
  starts.push_back(T);
  thread_local std::vector<int64_t> word_order;
  word_order.resize(static_cast<size_t>(words));
  std::iota(word_order.begin(), word_order.end(), int64_t{0});
  for (int64_t i = 0; i + 1 < words; ++i)
    std::swap(word_order[static_cast<size_t>(i)], word_order[static_cast<size_t>(i + stream.below(words - i))]);
  int64_t taken = 0;
  for (const int64_t w : word_order) {
    const int64_t begin = starts[static_cast<size_t>(w)], end = starts[static_cast<size_t>(w) + 1];
    if (taken + end - begin > chosen) continue;
    for (int64_t t = begin; t < end; ++t) order[static_cast<size_t>(taken++)] = t;
    if (taken == chosen) break;
  }
  return taken;
}

}  // namespace

MlmMasked mask_for_mlm(const torch::Tensor& windows, const MlmTokenIds& ids, uint64_t seed, int64_t step,
                       int64_t first) {
  const auto text = windows.to(torch::kLong).contiguous();
  const int64_t B = text.size(0), T = text.size(1), L = T + 2;
  const int64_t chosen = std::max<int64_t>(1, std::llround(kMlmChosen * static_cast<double>(T)));
  auto inputs = torch::empty({B, L}, torch::kLong);
  auto targets = torch::full({B, L}, int64_t{-100}, torch::kLong);
  std::vector<int64_t> selected;
  selected.reserve(static_cast<size_t>(B * chosen));  // at most: whole words may leave some out
  const int64_t* in = text.data_ptr<int64_t>();
  int64_t* out = inputs.data_ptr<int64_t>();
  int64_t* target = targets.data_ptr<int64_t>();
  std::vector<int64_t> order(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    int64_t* row = out + b * L;
    row[0] = ids.cls;
    row[L - 1] = ids.sep;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t token = in[b * T + t];
      row[t + 1] = ids.eos && token == *ids.eos ? ids.sep : token;
    }
    // `chosen` of the T text positions by a partial Fisher-Yates shuffle (or whole words), then each one's fate.
    MaskStream stream(seed, step, first + b);
    int64_t count = chosen;
    if (ids.continues_word) {
      count = choose_whole_words(in + b * T, T, *ids.continues_word, chosen, stream, order);
    } else {
      std::iota(order.begin(), order.end(), int64_t{0});
      for (int64_t i = 0; i < chosen; ++i)
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(i + stream.below(T - i))]);
    }
    std::sort(order.begin(), order.begin() + count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t at = order[static_cast<size_t>(i)] + 1;
      target[b * L + at] = row[at];
      const int64_t fate = stream.below(10);
      if (fate < 8) {
        row[at] = ids.mask;
      } else if (fate == 8) {
        row[at] = stream.below(ids.text_vocab);
      }
      selected.push_back(b * L + at);
    }
  }
  return {inputs, targets, torch::tensor(selected, torch::kLong)};
}

}  // namespace loom
