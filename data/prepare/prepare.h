// `loom prepare`: corpora of any size (text and JSON Lines files, gzip or zstd compressed) into a prepared
// directory that `data.train: DIR` / `data.valid: DIR` train on:
//   DIR/manifest.json              inputs, tokenizer, options, counts (data/prepare/prepared_manifest.h); written last
//   DIR/train-00000.bin, .idx ...  token shards (data/corpus/token_file.h) and their document indexes
//   DIR/valid-00000.bin, .idx ...  the validation split: documents whose text hash is under valid_fraction
//   DIR/tokenizer.model            with --train-tokenizer: the SentencePiece model trained first
// Streaming and multi-threaded (data/prepare/prepare_stream.h). A run whose inputs (sizes, checksums), options and
// tokenizer match DIR's manifest does nothing. Otherwise DIR's old manifest and shards go first, and a
// run that fails removes what it wrote, so DIR never holds shards that a manifest vouches for but that
// another run made.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/prepare/prepare_stream.h"
#include "data/prepare/prepared_manifest.h"
#include "data/prepare/tokenizer_training.h"

namespace loom {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories, glob patterns
  TokenizerConfig tokenizer;  // --tokenizer FILE (.model empty with train_tokenizer), --type, --pattern, ...
  std::filesystem::path out;
  StreamOptions stream;
  bool train_tokenizer = false;  // --train-tokenizer sentencepiece
  TokenizerTrainingOptions tokenizer_training;
};

struct PrepareResult {
  bool up_to_date = false;  // nothing done: DIR already held this preparation
  PreparedManifest manifest;
};

PrepareResult prepare(const PrepareOptions& options, const std::function<void(const StreamProgress&)>& progress = {});

// The tokenizer `loom prepare` encodes with: the one place that constructs it.
std::unique_ptr<Tokenizer> open_prepare_tokenizer(const TokenizerConfig& config);

}  // namespace loom
