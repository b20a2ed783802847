#include "train/translation_eval.h"

#include <algorithm>

namespace loom {
namespace {

// Row b of tokens (B, L) up to length[b].
std::vector<std::vector<int64_t>> rows(const torch::Tensor& tokens, const torch::Tensor& lengths, int64_t drop_last) {
  std::vector<std::vector<int64_t>> out;
  const auto t = tokens.contiguous().cpu();
  const auto l = lengths.cpu();
  for (int64_t b = 0; b < t.size(0); ++b) {
    const int64_t n = l[b].item<int64_t>() - drop_last;
    const int64_t* row = t[b].data_ptr<int64_t>();
    out.emplace_back(row, row + n);
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> batch_sources(const Seq2SeqBatch& batch) {
  return rows(batch.source, batch.source_lengths, 0);
}

std::vector<std::vector<int64_t>> batch_targets(const Seq2SeqBatch& batch) {
  return rows(batch.target_labels, batch.target_lengths, 1);  // labels are target + eos
}

BeamOptions beam_options(const DecodeConfig& decode) {
  BeamOptions o;
  o.decode = decode;
  o.bos = kBosId;
  o.eos = kEosId;
  return o;
}

TranslationEval evaluate_translation(EncoderDecoder& model, const Seq2SeqSource& data, const DecodeConfig& decode,
                                     int64_t limit) {
  const int64_t size = limit > 0 ? std::min(limit, data.eval_size()) : data.eval_size();
  const BeamOptions options = beam_options(decode);
  TranslationEval out;
  int64_t matches = 0;
  for (int64_t first = 0; first < size; first += decode.batch_size) {
    const auto batch = data.eval_batch(first, std::min(decode.batch_size, size - first));
    const auto hypotheses = translate(model, batch_sources(batch), options);
    const auto references = batch_targets(batch);
    for (size_t i = 0; i < references.size(); ++i) {
      matches += hypotheses[i].tokens == references[i] ? 1 : 0;
      out.hypotheses.push_back(hypotheses[i].tokens);
      out.references.push_back(references[i]);
    }
  }
  out.exact_match = size > 0 ? static_cast<double>(matches) / static_cast<double>(size) : 0.0;
  return out;
}

std::string translation_text(const std::vector<int64_t>& ids, const Tokenizer* tokenizer) {
  if (tokenizer) return decode_lines(*tokenizer, ids);
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

BleuScore corpus_bleu(const TranslationEval& translations, const Tokenizer& tokenizer) {
  BleuStats stats;
  for (size_t i = 0; i < translations.hypotheses.size(); ++i)
    stats.add(translation_text(translations.hypotheses[i], &tokenizer),
              translation_text(translations.references[i], &tokenizer));
  return stats.score();
}

}  // namespace loom
