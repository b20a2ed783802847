// Decoding for the encoder-decoder: greedy and beam search over a batch of sources, with a length
// penalty and a maximum length of max_len_a * source length + max_len_b tokens per sentence (capped by
// the model's context). Both drive a StepDecoder, which for the model decodes incrementally: the encoder
// runs once, its keys/values for the cross-attention are computed once, and each step feeds only the
// new token through cached self-attention keys/values (or, with use_cache off, the whole prefix again:
// the same numbers, for tests). Hypotheses are ranked as fairseq does: sum of token log-probabilities
// (eos included) / length^length_penalty, length counting eos; a sentence is done when `beam` hypotheses
// have ended (an eos among the best `beam` candidates of a step) or at its maximum length, where eos is
// forced. Not here: sampling (models/generate.h), n-best lists, early stopping heuristics.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/encoder_decoder.h"

namespace loom {

// The decode.* settings of the config, plus what the tokenizer and the caller fix.
struct BeamOptions {
  DecodeConfig decode;
  int64_t bos = 1;
  int64_t eos = 2;
  bool use_cache = true;
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // without bos and eos
  double score = 0;             // sum of log-probabilities / length^length_penalty
  double log_prob = 0;          // sum of log-probabilities, eos included
};

// What the search asks of a model: next-token log-probabilities and reordering of its rows.
class StepDecoder {
 public:
  virtual ~StepDecoder() = default;
  // tokens: (N, t), each row bos + the tokens so far -> (N, V) float log-probabilities of the next token.
  // Calls come with t = 1, 2, 3, ... and rows reordered only through select().
  virtual torch::Tensor next_log_probs(const torch::Tensor& tokens) = 0;
  virtual void select(const torch::Tensor& rows) = 0;  // keep rows (int64 indices), in that order
};

// The encoder-decoder as a StepDecoder over a batch of sources.
class ModelStepDecoder : public StepDecoder {
 public:
  // source (B, S), source_lengths (B), on the model's device
  ModelStepDecoder(EncoderDecoder model, const torch::Tensor& source, const torch::Tensor& source_lengths,
                   bool use_cache);
  torch::Tensor next_log_probs(const torch::Tensor& tokens) override;
  void select(const torch::Tensor& rows) override;

 private:
  EncoderDecoder model_;
  DecoderState state_;
  bool use_cache_;
};

// max_lengths[b]: tokens sentence b may have before its eos. Returns the best hypothesis per row.
// The tokens a translation of source_tokens may have before its eos: max_len_a * source_tokens + max_len_b, at most
// context - 1 (bos and the tokens fit the decoder's positions when eos is predicted). loom translate and the serving
// engine's translation runs (cli/served_model_options.h) both stop there.
int64_t translation_max_length(const DecodeConfig& decode, int64_t source_tokens, int64_t context);

std::vector<Hypothesis> greedy_search(StepDecoder& decoder, const std::vector<int64_t>& max_lengths,
                                      const BeamOptions& options);
std::vector<Hypothesis> beam_search(StepDecoder& decoder, const std::vector<int64_t>& max_lengths,
                                    const BeamOptions& options);

// Translates token sequences (without bos/eos) in one batch: greedy for beam 1, else beam search.
// An empty source gives an empty translation without running the model (it has no key to attend to).
std::vector<Hypothesis> translate(EncoderDecoder& model, const std::vector<std::vector<int64_t>>& sources,
                                  const BeamOptions& options);

}  // namespace loom
