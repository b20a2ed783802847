// The work `loom prepare` spreads over its threads: a batch of raw documents (text lines, or JSON Lines
// records) in, their tokens out, each document sent to the training or the validation split by a hash
// of its text. Per document, in order: the JSON field (a JSONL record), the UTF-8 check, the empty check,
// the split, the tokens (+ EOS). What is wrong with a document is reported with its file and line as a
// Problem; whether that stops the run (--on-error fail) or only counts (skip) is the caller's business,
// which is why encoding stops at the first problem under fail: nothing after it would be written.
// A document is encoded as plain text: a special token written in it ("<|endoftext|>") stays its
// characters, not its id (tiktoken's encode_ordinary), so no document can end another or smuggle in a
// control token; the only EOS is the one loom puts after each document.
// SFT (--sft, data/prepare/sft_record.h): a JSONL record is a prompt and a response (or chat messages), and each
// token gets a loss mask byte (1: the loss counts it); the EOS after a record counts.
// A pure function of the batch (and tokenizer): the same batch gives the same tokens on any thread.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/prepare/json_field.h"
#include "data/prepare/prepare_inputs.h"
#include "data/prepare/sft_record.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {

enum Split : int { kTrainSplit = 0, kValidSplit = 1 };
const char* split_name(int split);  // "train", "valid"

// Why a document was left out. Empty documents are always left out (and counted); the others are
// errors under --on-error fail.
enum class SkipReason : int { kMalformedJson, kMissingField, kNotAString, kInvalidUtf8, kTooLong, kEmpty, kCount };
const char* skip_reason_key(SkipReason reason);  // the manifest's key: "malformed_json", ...

struct DocumentBatch {
  // The documents back to back, each followed by '\n', then JsonFieldReader::kJsonPadding bytes.
  std::string text;
  struct Document {
    size_t offset = 0, size = 0;
    uint32_t file = 0;  // index into the input list
    int64_t line = 0;
    bool too_long = false;
  };
  std::vector<Document> documents;

  void add(std::string_view document_text, uint32_t file, int64_t line, bool too_long);
  void pad();  // after the last add()
};

struct Problem {
  uint32_t file = 0;
  int64_t line = 0;
  SkipReason reason = SkipReason::kMalformedJson;
  std::string detail;
};

struct EncodedBatch {
  std::array<std::vector<int32_t>, 2> tokens;    // per split: every document's tokens, EOS after each
  std::array<std::vector<uint32_t>, 2> lengths;  // per split and document: its tokens, EOS included
  std::array<std::vector<uint8_t>, 2> masks;     // SFT: per split, one loss mask byte per token (else empty)
  std::array<int64_t, 2> text_bytes{};
  std::array<int64_t, static_cast<size_t>(SkipReason::kCount)> skipped{};
  std::vector<Problem> problems;  // every skipped document but the empty ones, in input order
};

struct DocumentEncodeOptions {
  std::string field = "text";  // JSONL: dotted path of the text
  double valid_fraction = 0.0;
  bool stop_at_problem = true;  // --on-error fail
  SftOptions sft;
};

// Which split a document of this text goes to: a hash of its bytes against valid_fraction, so the same
// text always lands in the same split (duplicates never straddle train and valid).
int document_split(std::string_view text, double valid_fraction);

class DocumentEncoder {
 public:
  // inputs: the file list documents' `file` indexes; workers: threads that may call encode() at once.
  // Throws naming the tokenizer when it has no EOS.
  DocumentEncoder(const Tokenizer& tokenizer, const std::vector<InputFile>& inputs, DocumentEncodeOptions options,
                  size_t workers);
  ~DocumentEncoder();
  // Thread-safe across different `worker` indexes.
  EncodedBatch encode(const DocumentBatch& batch, size_t worker) const;

 private:
  const Tokenizer& tokenizer_;
  const std::vector<InputFile>& inputs_;
  DocumentEncodeOptions options_;
  int32_t eos_;
  // The document's tokens (and with SFT its mask) into `out`; false when it is left out.
  void encode_sft(std::string_view record, size_t worker, EncodedBatch& out,
                  const std::function<void(SkipReason, std::string)>& skip) const;

  std::vector<std::unique_ptr<JsonFieldReader>> json_;  // one per worker
  std::vector<std::unique_ptr<SftRecordReader>> sft_;   // one per worker, with --sft
};

}  // namespace loom
