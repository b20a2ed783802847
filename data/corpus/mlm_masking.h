// Masked language modelling's inputs (BERT): a window of text tokens becomes [CLS] window [SEP] (an EOS
// inside the window, where one document ends and the next begins, becomes [SEP] too), of which
// max(1, round(15%)) of the text positions are chosen; a chosen token becomes [MASK] with probability 0.8,
// a uniform random text token with 0.1, and stays itself with 0.1; the loss is on the chosen positions
// only. The choice is a pure function of (seed, step, sequence index) by SplitMix64 (never a library RNG),
// so masking is dynamic (a window drawn again is masked anew) and resuming at any layout is bit-exact.
// Whole-word masking (MlmTokenIds::continues_word): words (a token and the tokens that continue it) are
// chosen in a random order, a word skipped when it would pass the max(1, round(15%)) tokens, until no word
// fits; each chosen token's fate is then drawn as above.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace loom {

// The MLM special ids, and the text ids a random replacement draws from: [0, text_vocab).
struct MlmTokenIds {
  int64_t cls = 0, sep = 0, mask = 0, pad = 0;
  std::optional<int64_t> eos;  // the token files' document end, if any
  int64_t text_vocab = 0;
  // Whole-word masking: per text id, whether the token continues the word of the one before it; null: tokens
  // are chosen one by one.
  std::shared_ptr<const std::vector<bool>> continues_word;
};

struct MlmMasked {
  torch::Tensor inputs;    // (B, T + 2) int64: [CLS] masked window [SEP]
  torch::Tensor targets;   // (B, T + 2) int64: the original token at chosen positions, -100 elsewhere
  torch::Tensor selected;  // (N) int64: the chosen positions' indices in the flattened (B * (T + 2))
};

constexpr double kMlmChosen = 0.15;  // of the text positions
// The step whose sequences evaluation masks (a fixed set: the same masks at every evaluation).
constexpr int64_t kMlmEvalStep = -1;

// windows (B, T) int64 text tokens, row i being sequence first + i of the global batch of `step`.
MlmMasked mask_for_mlm(const torch::Tensor& windows, const MlmTokenIds& ids, uint64_t seed, int64_t step,
                       int64_t first);

}  // namespace loom
