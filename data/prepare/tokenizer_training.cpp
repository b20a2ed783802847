#include "data/prepare/tokenizer_training.h"

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "core/file_io.h"
#include "data/prepare/json_field.h"
#include "data/prepare/text_hash.h"

namespace loom {
namespace {

// SentencePiece reads sentences from this: the sample's lines, one by one.
class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return at_ >= lines_.size(); }
  const std::string& value() const override { return lines_[at_]; }
  void Next() override { ++at_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t at_ = 0;
};

// The sample's draw: a hash unrelated to the train/valid split's (another seed).
constexpr uint64_t kSampleSeed = 0x5eed;

// What the inputs hold as text, roughly: compressed files count 4 times their size.
double estimated_text_bytes(const std::vector<InputFile>& inputs) {
  double bytes = 0;
  for (const auto& input : inputs) bytes += static_cast<double>(input.bytes) * (input.compression == Compression::kNone ? 1 : 4);
  return std::max(bytes, 1.0);
}

}  // namespace

TokenizerTrainingReport train_sentencepiece(const std::vector<InputFile>& inputs, const TokenizerTrainingOptions& options,
                                            const std::filesystem::path& model_path) {
  LOOM_CHECK(options.vocab_size > 0, "--train-tokenizer needs --vocab N (the vocabulary size)");
  const double rate = std::min(1.0, static_cast<double>(options.sample_bytes) / estimated_text_bytes(inputs));
  CorpusReader corpus(inputs, options.text_split, options.max_document_bytes);
  JsonFieldReader json(options.field);
  std::vector<std::string> lines;
  TokenizerTrainingReport report;
  RawDocument document;
  uint32_t file = 0;
  std::string padded;
  while (report.bytes < options.sample_bytes && corpus.next(document, file)) {
    if (document.too_long) continue;
    std::string_view text = document.text;
    if (inputs[file].format == InputFormat::kJsonl) {
      padded.assign(text);
      padded.append(JsonFieldReader::kJsonPadding, ' ');
      const FieldResult field = json.read(std::string_view(padded.data(), text.size()));
      if (field.status != FieldStatus::kOk) continue;  // the tokenizing pass reports it
      text = field.text;
    } else if (!valid_utf8(text)) {
      continue;
    }
    if (text.empty() || text_draw(text, kSampleSeed) >= rate) continue;
    report.documents += 1;
    report.bytes += text.size();
    for (size_t start = 0; start <= text.size();) {  // a line is a sentence to SentencePiece
      const size_t end = std::min(text.find('\n', start), text.size());
      if (end > start) lines.emplace_back(text.substr(start, end - start));
      start = end + 1;
    }
  }
  LOOM_CHECK(!lines.empty(), "--train-tokenizer: the inputs hold no text to train a tokenizer on");

  // No model_prefix: the model comes back in memory (SentencePiece refuses both), to be written atomically.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"num_threads", std::to_string(std::max<size_t>(1, options.threads))},
      {"minloglevel", "1"},
  };
  Sentences sentences(lines);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &sentences, &model);
  LOOM_CHECK(status.ok(), "--train-tokenizer sentencepiece: ", status.ToString(),
             " (a smaller --vocab, or more text, may be what it needs)");
  write_file_atomic(model_path, model);
  return report;
}

}  // namespace loom
