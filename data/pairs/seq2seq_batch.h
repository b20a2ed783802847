// One batch of source -> target pairs for the encoder-decoder, padded to the longest sequence of each
// side. Every producer (the Bible pair sampler, the synthetic tasks) fills it the same way, and every
// consumer (trainer, evaluation, decoding) reads padding from the lengths, never from a token value.
//
// Token ids follow the sentencepiece defaults loom's tokenizers are trained with: 0 unk, 1 bos (start of
// every decoder input), 2 eos (end of every target); padding positions hold 0 and are masked.
#pragma once
#include <torch/torch.h>

namespace loom {

constexpr int64_t kBosId = 1;
constexpr int64_t kEosId = 2;
constexpr int64_t kIgnoreLabel = -100;  // label of a padding position: the loss skips it

struct Seq2SeqBatch {
  torch::Tensor source;          // (B, S) int64, source tokens (no bos/eos), 0 after source_lengths[b]
  torch::Tensor source_lengths;  // (B) int64
  torch::Tensor target_inputs;   // (B, T) int64: bos + target tokens, 0 after target_lengths[b]
  torch::Tensor target_labels;   // (B, T) int64: target tokens + eos, kIgnoreLabel after target_lengths[b]
  torch::Tensor target_lengths;  // (B) int64: target tokens + 1
  // What the loss averages over: the target tokens and their eos (train/task.h's TaskBatch counts them).
  int64_t loss_tokens() const { return target_lengths.sum().item<int64_t>(); }
  // What throughput counts of a pair batch: its target tokens too.
  int64_t tokens() const { return loss_tokens(); }
};

}  // namespace loom
