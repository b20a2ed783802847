// `loom prepare --train-tokenizer sentencepiece --vocab N`: a SentencePiece BPE model (byte fallback,
// full character coverage: the settings scripts/prepare_kjv.sh trains with) learned from a sample of the
// inputs' documents, before they are tokenized with it. The sample is every document whose text hash
// falls under sample_bytes / (estimated text bytes of the inputs), up to sample_bytes, so it spreads over
// all files and is the same on every run; SentencePiece keeps it in memory, which is what bounds it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/prepare/document_reader.h"
#include "data/prepare/prepare_inputs.h"

namespace loom {

struct TokenizerTrainingOptions {
  int64_t vocab_size = 0;
  uint64_t sample_bytes = 64ull << 20;
  size_t threads = 1;
  std::string field = "text";  // JSONL
  DocumentSplit text_split = DocumentSplit::kLines;
  size_t max_document_bytes = 64 << 20;
};

struct TokenizerTrainingReport {
  int64_t documents = 0;
  uint64_t bytes = 0;  // of sampled text
};

// Trains and writes the model to model_path atomically (a failed training leaves nothing there).
TokenizerTrainingReport train_sentencepiece(const std::vector<InputFile>& inputs, const TokenizerTrainingOptions& options,
                                            const std::filesystem::path& model_path);

}  // namespace loom
