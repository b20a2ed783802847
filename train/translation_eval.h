// Translation quality of an encoder-decoder on its evaluation set: every pair decoded (greedy or beam, as
// decode.* says) and compared with its reference. Exact match (the synthetic tasks' measure) is computed
// here; corpus BLEU needs the detokenized text and is computed by the caller from `hypotheses` and
// `references` with the run's tokenizer.
#pragma once
#include <vector>

#include "core/config.h"
#include "train/bleu.h"
#include "data/pairs/seq2seq_source.h"
#include "data/tokenizers/tokenizer.h"
#include "models/beam_search.h"
#include "models/encoder_decoder.h"

namespace loom {

struct TranslationEval {
  std::vector<std::vector<int64_t>> hypotheses;  // one per evaluation pair, in order
  std::vector<std::vector<int64_t>> references;
  double exact_match = 0;  // fraction of hypotheses equal to their reference
};

BeamOptions beam_options(const DecodeConfig& decode);

// The first `limit` pairs of the evaluation set (0: all of them), decode.batch_size at a time.
TranslationEval evaluate_translation(EncoderDecoder& model, const Seq2SeqSource& data, const DecodeConfig& decode,
                                     int64_t limit = 0);

// A translation as a line of text: detokenized, or its token ids separated by spaces without a tokenizer
// (the synthetic tasks).
std::string translation_text(const std::vector<int64_t>& ids, const Tokenizer* tokenizer);

// Corpus BLEU of the translations against the references, both detokenized with `tokenizer`.
BleuScore corpus_bleu(const TranslationEval& translations, const Tokenizer& tokenizer);

// The pairs of a batch as token lists: sources, and targets without eos.
std::vector<std::vector<int64_t>> batch_sources(const Seq2SeqBatch& batch);
std::vector<std::vector<int64_t>> batch_targets(const Seq2SeqBatch& batch);

}  // namespace loom
