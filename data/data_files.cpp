#include "data/data_files.h"

#include <filesystem>

#include "core/error.h"
#include "data/tokenizer.h"

namespace loom {

bool data_file_given(const std::string& path, const std::string& key, const Config& config) {
  if (path.empty()) return false;
  if (!std::filesystem::exists(path))
    throw ConfigError(config.where(key) + ": " + key + ": " + path +
                " does not exist (scripts/prepare_kjv.sh makes the KJV data, scripts/prepare_bible_mt.sh the "
                "English-Spanish pairs)");
  return true;
}

std::unique_ptr<TokenFile> open_token_file(const std::string& path, const std::string& key, const Config& config) {
  return data_file_given(path, key, config) ? std::make_unique<TokenFile>(path) : nullptr;
}

void check_tokenizer(const Config& config, const TokenFile& data, const TokenFile* other) {
  if (config.tokenizer.model.empty()) {
    if (other && other->tokenizer_crc() != data.tokenizer_crc())
      throw Error(other->path().string() + " and " + data.path().string() + " were made with different tokenizers");
    return;
  }
  const Tokenizer tokenizer(config.tokenizer.model);
  for (const TokenFile* file : {&data, other})
    if (file && tokenizer.checksum() != file->tokenizer_crc())
      throw Error(file->path().string() + " was not made with tokenizer.model=" + config.tokenizer.model +
                  " (checksum mismatch): re-run the data preparation or point tokenizer.model at the right model");
}

void resolve_vocab(Config& config, int64_t data_vocab, const std::string& data_name) {
  if (config.model.vocab_size == 0) config.model.vocab_size = data_vocab;
  if (config.model.vocab_size < data_vocab)
    throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: " +
                      std::to_string(config.model.vocab_size) + " is smaller than the vocabulary of " + data_name +
                      " (" + std::to_string(data_vocab) + ")");
}

}  // namespace loom
