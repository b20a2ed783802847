#include "data/prepare/prepare_stream.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "data/prepare/ordered_pool.h"
#include "data/prepare/shard_writer.h"

namespace loom {
namespace {

constexpr size_t kBatchBytes = 1 << 20;

const char* skip_hint(SkipReason reason) {
  switch (reason) {
    case SkipReason::kInvalidUtf8: return " (loom prepare reads UTF-8: convert the file, e.g. with iconv)";
    case SkipReason::kTooLong: return " (raise --max-document-mb, or split such documents)";
    case SkipReason::kMissingField:
    case SkipReason::kNotAString: return " (--field names the text's key; a dotted path reaches nested keys)";
    default: return "";
  }
}

std::string problem_text(const std::vector<InputFile>& inputs, const Problem& p, size_t max_document_bytes) {
  std::string detail = p.detail;
  if (p.reason == SkipReason::kTooLong)
    detail = "a document longer than " + std::to_string(max_document_bytes >> 20) + " MiB";
  return document_place(inputs.at(p.file), p.line) + ": " + detail + skip_hint(p.reason);
}

// Takes encoded batches in input order: into the shards, the counts and the log.
class BatchSink {
 public:
  BatchSink(const std::vector<InputFile>& inputs, const Tokenizer& tokenizer, const StreamOptions& options,
            const std::filesystem::path& dir)
      : inputs_(inputs),
        options_(options),
        writers_{ShardWriter(dir, split_name(kTrainSplit), tokenizer.vocab_size(), tokenizer.checksum(), options.shard_tokens,
                             options.encode.sft.enabled),
                 ShardWriter(dir, split_name(kValidSplit), tokenizer.vocab_size(), tokenizer.checksum(), options.shard_tokens,
                             options.encode.sft.enabled)} {}

  void take(const EncodedBatch& batch) {
    for (const auto& problem : batch.problems) {
      if (options_.encode.stop_at_problem)
        throw Error(problem_text(inputs_, problem, options_.max_document_bytes) +
                    "; --on-error skip leaves such documents out and counts them in the manifest");
      if (warned_++ < options_.warnings)
        spdlog::warn("skipped {}", problem_text(inputs_, problem, options_.max_document_bytes));
    }
    for (size_t r = 0; r < batch.skipped.size(); ++r) skipped_[r] += batch.skipped[r];
    for (int s : {kTrainSplit, kValidSplit}) {
      auto& split = outcome_.splits[static_cast<size_t>(s)];
      const int32_t* tokens = batch.tokens[static_cast<size_t>(s)].data();
      const auto& masks = batch.masks[static_cast<size_t>(s)];
      const uint8_t* mask = masks.empty() ? nullptr : masks.data();  // SFT only
      for (const uint32_t length : batch.lengths[static_cast<size_t>(s)]) {
        writers_[static_cast<size_t>(s)].add_document(tokens, length, mask);
        tokens += length;
        if (mask != nullptr) mask += length;
      }
      split.documents += static_cast<int64_t>(batch.lengths[static_cast<size_t>(s)].size());
      split.tokens += static_cast<int64_t>(batch.tokens[static_cast<size_t>(s)].size());
      split.text_bytes += batch.text_bytes[static_cast<size_t>(s)];
    }
  }

  int64_t documents() const { return outcome_.splits[0].documents + outcome_.splits[1].documents; }
  int64_t tokens() const { return outcome_.splits[0].tokens + outcome_.splits[1].tokens; }

  StreamOutcome finish() {
    for (int s : {kTrainSplit, kValidSplit})
      outcome_.splits[static_cast<size_t>(s)].shards = writers_[static_cast<size_t>(s)].finish();
    for (size_t r = 0; r < skipped_.size(); ++r)
      outcome_.skipped[skip_reason_key(static_cast<SkipReason>(r))] = skipped_[r];
    if (warned_ > options_.warnings)
      spdlog::warn("... and {} more skipped documents (counted in manifest.json)", warned_ - options_.warnings);
    return std::move(outcome_);
  }

 private:
  const std::vector<InputFile>& inputs_;
  const StreamOptions& options_;
  std::array<ShardWriter, 2> writers_;
  std::array<int64_t, static_cast<size_t>(SkipReason::kCount)> skipped_{};
  StreamOutcome outcome_;
  size_t warned_ = 0;
};

}  // namespace

std::string document_place(const InputFile& input, int64_t line) {
  return input.path.string() + ":" + std::to_string(line);
}

StreamOutcome tokenize_corpus(const std::vector<InputFile>& inputs, const Tokenizer& tokenizer,
                              const StreamOptions& options, const std::filesystem::path& dir,
                              const std::function<void(const StreamProgress&)>& progress) {
  const size_t threads = std::max<size_t>(1, options.threads);
  BatchSink sink(inputs, tokenizer, options, dir);
  DocumentEncoder encoder(tokenizer, inputs, options.encode, threads);
  OrderedPool<EncodedBatch> pool(threads);  // after the encoder and sink it uses: destroyed first
  CorpusReader corpus(inputs, options.text_split, options.max_document_bytes);
  StreamProgress shown;
  for (const auto& input : inputs) shown.bytes_total += input.bytes;

  auto report = [&] {
    if (!progress) return;
    shown.bytes_read = corpus.bytes_read();
    shown.documents = sink.documents();
    shown.tokens = sink.tokens();
    progress(shown);
  };
  DocumentBatch batch;
  auto submit = [&] {
    batch.pad();
    pool.submit([&encoder, b = std::move(batch)](size_t worker) { return encoder.encode(b, worker); });
    batch = DocumentBatch{};
    while (pool.in_flight() > 2 * threads + 2) sink.take(pool.next());
    report();
  };
  RawDocument document;
  uint32_t file = 0;
  while (corpus.next(document, file)) {
    batch.add(document.text, file, document.line, document.too_long);
    if (batch.text.size() >= kBatchBytes) submit();
  }
  if (!batch.documents.empty()) submit();
  while (pool.in_flight() > 0) sink.take(pool.next());
  StreamOutcome outcome = sink.finish();
  for (size_t i = 0; i < inputs.size(); ++i) outcome.input_crcs.push_back(corpus.file_crc(i));
  report();
  return outcome;
}

}  // namespace loom
