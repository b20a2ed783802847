#include "data/pairs/seq2seq_source.h"

#include <algorithm>

#include "core/error.h"
#include "data/corpus/data_files.h"
#include "data/pairs/pair_source.h"
#include "data/pairs/synthetic_pairs.h"

namespace loom {

Seq2SeqBatch collate_pairs(const std::vector<TokenPair>& pairs) {
  const auto B = static_cast<int64_t>(pairs.size());
  int64_t S = 0, T = 0;
  for (const auto& [source, target] : pairs) {
    S = std::max<int64_t>(S, static_cast<int64_t>(source.size()));
    T = std::max<int64_t>(T, static_cast<int64_t>(target.size()) + 1);
  }
  Seq2SeqBatch batch;
  batch.source = torch::zeros({B, S}, torch::kLong);  // 0 (unk) pads; the lengths say where
  batch.target_inputs = torch::zeros({B, T}, torch::kLong);
  batch.target_labels = torch::full({B, T}, kIgnoreLabel, torch::kLong);
  batch.source_lengths = torch::empty({B}, torch::kLong);
  batch.target_lengths = torch::empty({B}, torch::kLong);
  // Filled through raw pointers: per-element tensor indexing would cost more than the copy.
  auto* source = batch.source.data_ptr<int64_t>();
  auto* inputs = batch.target_inputs.data_ptr<int64_t>();
  auto* labels = batch.target_labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& [src, tgt] = pairs[b];
    const auto m = static_cast<int64_t>(tgt.size());
    std::copy(src.begin(), src.end(), source + b * S);
    inputs[b * T] = kBosId;
    std::copy(tgt.begin(), tgt.end(), inputs + b * T + 1);
    std::copy(tgt.begin(), tgt.end(), labels + b * T);
    labels[b * T + m] = kEosId;
    batch.source_lengths.data_ptr<int64_t>()[b] = static_cast<int64_t>(src.size());
    batch.target_lengths.data_ptr<int64_t>()[b] = m + 1;
  }
  return batch;
}

Seq2SeqBatch pad_to_multiple(const Seq2SeqBatch& batch, int64_t multiple) {
  auto extra = [multiple](int64_t n) { return (multiple - n % multiple) % multiple; };
  const int64_t more_source = extra(batch.source.size(1)), more_target = extra(batch.target_inputs.size(1));
  if (more_source == 0 && more_target == 0) return batch;
  namespace F = torch::nn::functional;
  Seq2SeqBatch out = batch;
  out.source = F::pad(batch.source, F::PadFuncOptions({0, more_source}));  // (B, S + more_source), zeros
  out.target_inputs = F::pad(batch.target_inputs, F::PadFuncOptions({0, more_target}));
  out.target_labels = F::pad(batch.target_labels, F::PadFuncOptions({0, more_target}).value(kIgnoreLabel));
  return out;
}

std::unique_ptr<Seq2SeqSource> make_seq2seq_source(const Config& config, bool training) {
  const auto& d = config.data;
  if (d.synthetic != SyntheticTask::kNone) {
    SyntheticOptions options;
    options.task = d.synthetic;
    options.vocab = d.synthetic_vocab;
    options.min_len = d.synthetic_min_len;
    options.max_len = d.synthetic_max_len;
    options.valid_size = d.synthetic_valid_size;
    options.batch_size = config.train.batch_size;
    options.seed = static_cast<uint64_t>(config.run.seed);
    return std::make_unique<SyntheticPairs>(options);
  }
  auto open_pairs = [&](const std::string& path, const std::string& key) {
    return data_file_given(path, key, config) ? std::make_unique<PairFile>(path) : nullptr;
  };
  std::vector<TrainPairs> train;
  if (training) {
    if (d.train.empty())
      throw ConfigError(config.where("data.train") + ": data.train: no training pair file given (scripts/"
                        "prepare_bible_mt.sh makes datasets/bible-mt/train.bin), or set data.synthetic");
    if (config.train.batch_tokens <= 0)
      throw ConfigError(config.where("train.batch_tokens") + ": train.batch_tokens: translation pairs are batched "
                        "by tokens; set it (for example 4096)");
    for (const auto& source : d.train) {
      auto file = open_pairs(source.path, "data.train");
      if (file) train.push_back({source.path, source.weight, std::move(file)});
    }
  }
  auto valid = open_pairs(d.valid, "data.valid");
  if (train.empty() && !valid)
    throw ConfigError(config.where("data.valid") + ": data.valid: no evaluation pair file (pass --set data.valid=FILE)");
  // Every file was made with the config's tokenizer (without one, with the first file's).
  const TokenFile& first = !train.empty() ? train.front().file->tokens() : valid->tokens();
  check_tokenizer(config, first, !train.empty() && valid ? &valid->tokens() : nullptr);
  for (size_t i = 1; i < train.size(); ++i) check_tokenizer(config, train[i].file->tokens(), &first);
  // Batches are cut the same for every parallel layout (min_pairs 1), so any layout trains on the same
  // pairs; the Trainer copes with a batch of fewer pairs than DP ranks.
  const PairSamplerOptions options{config.train.batch_tokens, 1, static_cast<uint64_t>(config.run.seed)};
  return std::make_unique<PairFileSource>(std::move(train), std::move(valid), options, config.model.max_seq_len);
}

}  // namespace loom
