// Language-model batches: windows of seq_len + 1 tokens whose start positions are a pure function of
// (seed, step, sequence index in the global batch). No iterator state: resume needs only the step, and
// a DP rank takes its slice of the global batch by index, so changing the DP size keeps the data exact.
// Packed documents (data.document_mask) give each input its position in its document; SFT data's loss
// mask turns the targets it leaves out into kIgnoreTarget, which the loss skips.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "data/corpus/token_corpus.h"

namespace loom {

// The target of a token the loss leaves out: optim/cross_entropy.h's kIgnoreIndex (PyTorch's -100); data/
// cannot include optim/, which checks that the two agree.
constexpr int64_t kIgnoreTarget = -100;

struct LmBatch {
  torch::Tensor inputs;   // (B, T) int64
  torch::Tensor targets;  // (B, T) int64, inputs shifted by one; kIgnoreTarget where a loss mask leaves one out
  // data.document_mask: (B, T) int64, each input's position in its document (models/document_mask.h).
  // Undefined otherwise: each row is one sequence.
  torch::Tensor positions;
  int64_t ignored_targets = 0;  // targets that are kIgnoreTarget
  // What the loss averages over: every target a loss mask keeps (train/task.h's TaskBatch counts them).
  int64_t loss_tokens() const { return targets.numel() - ignored_targets; }
  // The tokens the model reads (throughput, tokens_by_source): every input.
  int64_t tokens() const { return inputs.numel(); }
};

class LmSampler {
 public:
  LmSampler(uint64_t seed, int64_t seq_len) : seed_(seed), seq_len_(seq_len) {}

  // The window (TokenCorpus::window's number) of sequence `index` of the global batch of `step`.
  int64_t window_start(const TokenCorpus& corpus, int64_t step, int64_t index) const;

  // Sequences [first, first + count) of the global batch of `step`.
  LmBatch train_batch(const TokenCorpus& corpus, int64_t step, int64_t first, int64_t count) const;

  // Evaluation: consecutive non-overlapping windows; sequences [first, first + count) (wrapping around).
  LmBatch eval_batch(const TokenCorpus& corpus, int64_t first, int64_t count) const;

  // Windows (seq_len + 1 tokens each) as a batch.
  LmBatch batch_of(const std::vector<CorpusWindow>& windows) const;

  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  int64_t seq_len_;
};

}  // namespace loom
