#include "data/seq2seq_source.h"

#include <algorithm>

#include "core/error.h"
#include "data/synthetic_pairs.h"

namespace loom {

Seq2SeqBatch collate_pairs(const std::vector<TokenPair>& pairs) {
  const auto B = static_cast<int64_t>(pairs.size());
  int64_t S = 0, T = 0;
  for (const auto& [source, target] : pairs) {
    S = std::max<int64_t>(S, static_cast<int64_t>(source.size()));
    T = std::max<int64_t>(T, static_cast<int64_t>(target.size()) + 1);
  }
  Seq2SeqBatch batch;
  batch.source = torch::zeros({B, S}, torch::kLong);
  batch.target_inputs = torch::zeros({B, T}, torch::kLong);
  batch.target_labels = torch::full({B, T}, kIgnoreLabel, torch::kLong);
  batch.source_lengths = torch::zeros({B}, torch::kLong);
  batch.target_lengths = torch::zeros({B}, torch::kLong);
  auto source = batch.source.accessor<int64_t, 2>();
  auto inputs = batch.target_inputs.accessor<int64_t, 2>();
  auto labels = batch.target_labels.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& [src, tgt] = pairs[b];
    const auto n = static_cast<int64_t>(src.size()), m = static_cast<int64_t>(tgt.size());
    for (int64_t i = 0; i < n; ++i) source[b][i] = src[i];
    inputs[b][0] = kBosId;
    for (int64_t i = 0; i < m; ++i) {
      inputs[b][i + 1] = tgt[i];
      labels[b][i] = tgt[i];
    }
    labels[b][m] = kEosId;
    batch.source_lengths[b] = n;
    batch.target_lengths[b] = m + 1;
  }
  return batch;
}

std::unique_ptr<Seq2SeqSource> make_seq2seq_source(const Config& config) {
  const auto& d = config.data;
  if (!d.synthetic.empty()) {
    return std::make_unique<SyntheticPairs>(SyntheticOptions{d.synthetic, d.synthetic_vocab, d.synthetic_min_len,
                                                             d.synthetic_max_len, d.synthetic_valid_size,
                                                             static_cast<uint64_t>(config.run.seed)});
  }
  // The Bible pair files (data/pair_*, scripts/prepare_bible_mt.sh) plug in here.
  throw ConfigError(config.where("data.synthetic") +
                    ": data.synthetic: model.arch=transformer needs pair data; set data.synthetic=reverse (or copy) "
                    "for a synthetic task");
}

}  // namespace loom
