#include "data/pairs/pair_file.h"

#include "core/error.h"
#include "data/pairs/seq2seq_batch.h"

namespace loom {

PairFile::PairFile(const std::filesystem::path& path) : tokens_(path) {
  const std::string name = path.string();
  LOOM_CHECK(tokens_.layout() == TokenLayout::kPairs, name, " holds ", layout_name(tokens_.layout()),
             ", not translation pairs: make it with loom tokenize --target (scripts/prepare_bible_mt.sh does)");
  starts_.push_back(0);
  bool in_source = true;
  for (int64_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_.at(i) != kEosId) continue;
    if (in_source) {
      middles_.push_back(i);
    } else {
      starts_.push_back(i + 1);
    }
    in_source = !in_source;
  }
  LOOM_CHECK(in_source && starts_.back() == tokens_.size(), name,
             ": corrupt pair file: the tokens do not end with a complete source EOS target EOS pair");
  LOOM_CHECK(size() > 0, name, ": holds no pairs");
}

torch::Tensor PairFile::source(int64_t pair) const {
  TORCH_CHECK(pair >= 0 && pair < size(), "pair ", pair, " outside ", path().string(), " of ", size(), " pairs");
  return tokens_.slice(starts_[pair], source_length(pair));
}

torch::Tensor PairFile::target(int64_t pair) const {
  TORCH_CHECK(pair >= 0 && pair < size(), "pair ", pair, " outside ", path().string(), " of ", size(), " pairs");
  return tokens_.slice(middles_[pair] + 1, target_length(pair));
}

void write_pair_file(const std::filesystem::path& path, const std::vector<std::vector<int32_t>>& sources,
                     const std::vector<std::vector<int32_t>>& targets, int64_t vocab_size, uint32_t tokenizer_crc) {
  LOOM_CHECK(sources.size() == targets.size(), path.string(), ": ", sources.size(), " sources but ", targets.size(),
             " targets");
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < sources.size(); ++i) {
    for (const auto* side : {&sources[i], &targets[i]}) {
      LOOM_CHECK(!side->empty(), path.string(), ": pair ", i, " has an empty ",
                 side == &sources[i] ? "source" : "target", " (drop such pairs before tokenizing)");
      for (int32_t id : *side)
        LOOM_CHECK(id != kEosId, path.string(), ": pair ", i, " holds EOS (id ", kEosId, ") inside a sentence");
      tokens.insert(tokens.end(), side->begin(), side->end());
      tokens.push_back(static_cast<int32_t>(kEosId));
    }
  }
  write_token_file(path, tokens, vocab_size, tokenizer_crc, TokenLayout::kPairs);
}

}  // namespace loom
