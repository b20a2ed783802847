// The proposers of speculative decoding (serve/speculative.h): a Drafter guesses the next tokens of running
// sequences, the target model checks them all in one forward. Two kinds:
//   NgramDrafter       prompt lookup (Saxena 2023): the tokens that followed the latest earlier occurrence of the
//                      sequence's last n tokens (n from ngram_max down to ngram_min); no model, deterministic, so
//                      its distribution q is one-hot at each proposal;
//   DraftModelDrafter  a smaller model with the same tokenizer (serve/draft_model.h) samples k tokens from its
//                      own distribution q, filtered as the request's sampling options filter the target's.
// A drafter knows a sequence by the engine's request id and forgets it on release() (finished, cancelled or
// preempted); its proposals depend on the sequence's tokens and generator alone, never on the batch.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "models/generate.h"

namespace loom {

// One running sequence to draft for: all its tokens (prompt and generated), its sampling options and generator.
struct DraftRow {
  int64_t id = 0;
  const std::vector<int64_t>* tokens = nullptr;
  const SamplingOptions* sampling = nullptr;
  at::Generator* generator = nullptr;
};

// Up to k proposed tokens; q (n, V) float: the distribution each was drawn from (after the request's filters),
// undefined for a deterministic drafter (one-hot at each token).
struct Draft {
  std::vector<int64_t> tokens;
  torch::Tensor q;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // A draft of at most k tokens for each row (in order); fewer, even none, when there is nothing to propose.
  virtual std::vector<Draft> propose(const std::vector<DraftRow>& rows, int64_t k) = 0;
  // The sequence left (or was preempted): its state goes.
  virtual void release(int64_t id) { (void)id; }
  virtual const char* name() const = 0;  // "ngram", "draft model"
};

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int64_t ngram_max = 3, int64_t ngram_min = 1);
  std::vector<Draft> propose(const std::vector<DraftRow>& rows, int64_t k) override;
  const char* name() const override { return "ngram"; }
  // The lookup on one token list: the (at most k) tokens after the latest earlier match of its last n tokens.
  std::vector<int64_t> lookup(const std::vector<int64_t>& tokens, int64_t k) const;

 private:
  int64_t ngram_max_, ngram_min_;
};

}  // namespace loom
