// The one pass of `loom prepare` over its inputs: documents are read in input order on the calling
// thread (decompression, cutting into documents), encoded in batches of about a megabyte on `threads`
// workers (JSON, UTF-8 and empty checks, split, tokens: data/prepare/document_encoder.h), and written in input
// order into the two splits' shards (data/prepare/shard_writer.h). At most 2 * threads + 2 batches are in
// flight, so memory is a constant (a few megabytes per thread, plus the longest document) whatever the
// corpus size, and the shards are the same byte for byte whatever the number of threads.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/prepare/document_encoder.h"
#include "data/prepare/document_reader.h"
#include "data/prepare/prepared_manifest.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {

struct StreamOptions {
  DocumentEncodeOptions encode;
  DocumentSplit text_split = DocumentSplit::kLines;
  size_t max_document_bytes = 64 << 20;
  int64_t shard_tokens = int64_t{1} << 28;
  size_t threads = 1;
  size_t warnings = 10;  // --on-error skip: skipped documents logged one by one, the rest only counted
};

struct StreamProgress {
  uint64_t bytes_read = 0, bytes_total = 0;  // of the input files (compressed, as on disk)
  int64_t documents = 0, tokens = 0;
};

struct StreamOutcome {
  std::array<PreparedSplit, 2> splits;
  std::map<std::string, int64_t> skipped;  // by skip_reason_key, every reason present
  std::vector<uint32_t> input_crcs;
};

// "corpus/a.jsonl:17"
std::string document_place(const InputFile& input, int64_t line);

StreamOutcome tokenize_corpus(const std::vector<InputFile>& inputs, const Tokenizer& tokenizer,
                              const StreamOptions& options, const std::filesystem::path& dir,
                              const std::function<void(const StreamProgress&)>& progress = {});

}  // namespace loom
