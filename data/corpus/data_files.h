// Opening the data files a config names, with the checks every task makes: the file (or prepared
// directory) exists (else an error naming the key and how to make it), it was made with tokenizer.model,
// and model.vocab_size covers its vocabulary.
#pragma once
#include <memory>
#include <string>

#include <vector>

#include "core/config.h"
#include "data/corpus/token_corpus.h"
#include "data/corpus/token_file.h"

namespace loom {

// Whether the config key `key` names a file (false: `path` is empty); throws when the file is missing.
bool data_file_given(const std::string& path, const std::string& key, const Config& config);

// The token file at `path` (config key `key`, for messages); null when path is empty.
std::unique_ptr<TokenFile> open_token_file(const std::string& path, const std::string& key, const Config& config);

// The token file or split `split` of the prepared directory at `path` (config key `key`); null when path
// is empty. Errors name the key.
std::unique_ptr<TokenCorpus> open_token_corpus(const std::string& path, const std::string& key, const std::string& split,
                                               const Config& config);

// Throws unless every corpus was made with the config's tokenizer.model; without one, unless they were
// all made with the same tokenizer.
void check_tokenizer(const Config& config, const std::vector<const TokenCorpus*>& corpora);

// Throws unless `data` (and `other`, when given) was made with the config's tokenizer.model; without
// one, unless both files were made with the same tokenizer.
void check_tokenizer(const Config& config, const TokenFile& data, const TokenFile* other = nullptr);

// Fills model.vocab_size from the data's vocabulary when it is 0, and checks the data fits the model;
// `data_name` names the data in the message.
void resolve_vocab(Config& config, int64_t data_vocab, const std::string& data_name);

// The vocabulary a run of this config will have, found without training (for `loom info`): model.vocab_size,
// else the size of tokenizer.model, else data.train's. A ConfigError naming the keys when none is known.
int64_t planned_vocab_size(const Config& config);

}  // namespace loom
