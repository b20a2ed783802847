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

// Throws unless model.vocab_size (resolved: planned_vocab_size) covers the data's vocabulary; `data_name`
// names the data in the message.
void check_vocab(const Config& config, int64_t data_vocab, const std::string& data_name);

// The vocabulary a run of this config has, found before anything is built (train/run_plan.h):
// model.vocab_size, else data.synthetic_vocab for a synthetic task, else the size of tokenizer.model, else
// data.train's, else data.valid's. A ConfigError naming the keys when none is known.
int64_t planned_vocab_size(const Config& config);

}  // namespace loom
