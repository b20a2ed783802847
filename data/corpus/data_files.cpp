#include "data/corpus/data_files.h"

#include <filesystem>

#include "core/error.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {

bool data_file_given(const std::string& path, const std::string& key, const Config& config) {
  if (path.empty()) return false;
  if (!std::filesystem::exists(path))
    throw ConfigError(config.where(key) + ": " + key + ": " + path +
                " does not exist (loom prepare makes a directory of your own data; scripts/prepare_kjv.sh makes the KJV "
                "data, scripts/prepare_bible_mt.sh the "
                "English-Spanish pairs)");
  return true;
}

std::unique_ptr<TokenFile> open_token_file(const std::string& path, const std::string& key, const Config& config) {
  return data_file_given(path, key, config) ? std::make_unique<TokenFile>(path) : nullptr;
}

std::unique_ptr<TokenCorpus> open_token_corpus(const std::string& path, const std::string& key, const std::string& split,
                                               const Config& config) {
  if (!data_file_given(path, key, config)) return nullptr;
  try {
    return std::make_unique<TokenCorpus>(path, split);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error(key + ": " + e.what());
  }
}

void check_tokenizer(const Config& config, const std::vector<const TokenCorpus*>& corpora) {
  if (corpora.empty()) return;
  if (config.tokenizer.model.empty()) {
    for (const TokenCorpus* c : corpora)
      if (c->tokenizer_crc() != corpora.front()->tokenizer_crc())
        throw Error(corpora.front()->name() + " and " + c->name() + " were made with different tokenizers");
    return;
  }
  const auto tokenizer = load_tokenizer(config.tokenizer);
  for (const TokenCorpus* c : corpora)
    if (tokenizer->checksum() != c->tokenizer_crc())
      throw Error(c->name() + " was not made with tokenizer.model=" + config.tokenizer.model +
                  " (checksum mismatch): re-run the data preparation or point tokenizer.model at the right model");
}

void check_tokenizer(const Config& config, const TokenFile& data, const TokenFile* other) {
  if (config.tokenizer.model.empty()) {
    if (other && other->tokenizer_crc() != data.tokenizer_crc())
      throw Error(other->path().string() + " and " + data.path().string() + " were made with different tokenizers");
    return;
  }
  const auto tokenizer = load_tokenizer(config.tokenizer);
  for (const TokenFile* file : {&data, other})
    if (file && tokenizer->checksum() != file->tokenizer_crc())
      throw Error(file->path().string() + " was not made with tokenizer.model=" + config.tokenizer.model +
                  " (checksum mismatch): re-run the data preparation or point tokenizer.model at the right model");
}

void check_vocab(const Config& config, int64_t data_vocab, const std::string& data_name) {
  if (config.model.vocab_size < data_vocab)
    throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: " +
                      std::to_string(config.model.vocab_size) + " is smaller than the vocabulary of " + data_name +
                      " (" + std::to_string(data_vocab) + ")");
}

int64_t planned_vocab_size(const Config& config) {
  if (config.model.vocab_size > 0) return config.model.vocab_size;
  if (config.data.synthetic != SyntheticTask::kNone) return config.data.synthetic_vocab;
  const auto& tokenizer = config.tokenizer.model;
  if (!tokenizer.empty() && std::filesystem::exists(tokenizer)) return load_tokenizer(config.tokenizer)->vocab_size();
  // A mixture's sources share one tokenizer (check_tokenizer): the first one's vocabulary is the run's.
  const std::string train = config.data.train.empty() ? std::string() : config.data.train.front().path;
  if (!train.empty() && std::filesystem::exists(train)) return TokenCorpus(train, "train").vocab_size();
  const std::string& valid = config.data.valid;  // evaluating without the training data
  if (!valid.empty() && std::filesystem::exists(valid)) return TokenCorpus(valid, "valid").vocab_size();
  std::string why;
  if (!tokenizer.empty()) why = " tokenizer.model=" + tokenizer + " does not exist yet";
  if (!train.empty()) why += std::string(why.empty() ? "" : " and") + " data.train=" + train + " does not exist yet";
  throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: 0 takes the tokenizer's size, but" +
                    (why.empty() ? " the config names no tokenizer.model or data.train" : why) +
                    ": prepare the data first (scripts/prepare_kjv.sh for the KJV) or pass --set model.vocab_size=N");
}

}  // namespace loom
