#include "data/prepare/document_encoder.h"

#include <algorithm>

#include "core/error.h"
#include "data/prepare/text_hash.h"

namespace loom {
namespace {

bool whitespace_only(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

// Documents are plain text (the header says why); nothing is added around them but the EOS after each.
constexpr EncodeOptions kPlainText{/*special_in_text=*/false, /*add_special_tokens=*/false};
// A chat template's own text is the user's markup: the special tokens it names become their ids.
constexpr EncodeOptions kTemplateText{/*special_in_text=*/true, /*add_special_tokens=*/false};

SkipReason reason_of(FieldStatus status) {
  switch (status) {
    case FieldStatus::kMalformed: return SkipReason::kMalformedJson;
    case FieldStatus::kInvalidUtf8: return SkipReason::kInvalidUtf8;
    case FieldStatus::kMissing: return SkipReason::kMissingField;
    case FieldStatus::kNotString: return SkipReason::kNotAString;
    case FieldStatus::kOk: break;
  }
  return SkipReason::kEmpty;
}

}  // namespace

const char* split_name(int split) { return split == kValidSplit ? "valid" : "train"; }

const char* skip_reason_key(SkipReason reason) {
  switch (reason) {
    case SkipReason::kMalformedJson: return "malformed_json";
    case SkipReason::kMissingField: return "missing_field";
    case SkipReason::kNotAString: return "not_a_string";
    case SkipReason::kInvalidUtf8: return "invalid_utf8";
    case SkipReason::kTooLong: return "too_long";
    case SkipReason::kEmpty: return "empty";
    case SkipReason::kCount: break;
  }
  return "unknown";
}

void DocumentBatch::add(std::string_view document_text, uint32_t file, int64_t line, bool too_long) {
  documents.push_back({text.size(), document_text.size(), file, line, too_long});
  text.append(document_text);
  text += '\n';
}

void DocumentBatch::pad() { text.append(JsonFieldReader::kJsonPadding, ' '); }

int document_split(std::string_view text, double valid_fraction) {
  if (valid_fraction <= 0) return kTrainSplit;
  return text_draw(text) < valid_fraction ? kValidSplit : kTrainSplit;
}

DocumentEncoder::DocumentEncoder(const Tokenizer& tokenizer, const std::vector<InputFile>& inputs,
                                 DocumentEncodeOptions options, size_t workers)
    : tokenizer_(tokenizer), inputs_(inputs), options_(std::move(options)), eos_(tokenizer.require_eos()) {
  for (size_t w = 0; w < workers; ++w) json_.push_back(std::make_unique<JsonFieldReader>(options_.field));
  if (options_.sft.enabled)
    for (size_t w = 0; w < workers; ++w) sft_.push_back(std::make_unique<SftRecordReader>(options_.sft));
}

void DocumentEncoder::encode_sft(std::string_view line, size_t worker, EncodedBatch& out,
                                 const std::function<void(SkipReason, std::string)>& skip) const {
  SftRecord record = sft_.at(worker)->read(line);
  if (record.status != FieldStatus::kOk) return skip(reason_of(record.status), std::move(record.detail));
  if (record.counted_bytes == 0) return skip(SkipReason::kEmpty, "");  // nothing for the loss to learn
  const auto split = static_cast<size_t>(document_split(line, options_.valid_fraction));  // the whole record's hash
  auto& tokens = out.tokens[split];
  auto& mask = out.masks[split];
  const size_t start = tokens.size();
  for (const auto& piece : record.pieces) {
    const size_t before = tokens.size();
    tokenizer_.encode_to(piece.text, tokens, piece.template_text ? kTemplateText : kPlainText);
    mask.insert(mask.end(), tokens.size() - before, piece.counted ? 1 : 0);
    out.text_bytes[split] += static_cast<int64_t>(piece.text.size());
  }
  tokens.push_back(eos_);
  mask.push_back(1);  // the end of a response is learned too
  out.lengths[split].push_back(static_cast<uint32_t>(tokens.size() - start));
}

DocumentEncoder::~DocumentEncoder() = default;

EncodedBatch DocumentEncoder::encode(const DocumentBatch& batch, size_t worker) const {
  EncodedBatch out;
  JsonFieldReader& json = *json_.at(worker);
  for (const auto& doc : batch.documents) {
    auto skip = [&](SkipReason reason, std::string detail) {
      out.skipped[static_cast<size_t>(reason)] += 1;
      if (reason != SkipReason::kEmpty) out.problems.push_back({doc.file, doc.line, reason, std::move(detail)});
    };
    if (doc.too_long) {
      skip(SkipReason::kTooLong, "");
    } else {
      std::string_view text(batch.text.data() + doc.offset, doc.size);
      bool ok = true;
      if (inputs_.at(doc.file).format == InputFormat::kJsonl) {
        if (whitespace_only(text)) {
          skip(SkipReason::kEmpty, "");
          continue;
        }
        if (!sft_.empty()) {
          encode_sft(text, worker, out, skip);
          if (options_.stop_at_problem && !out.problems.empty()) break;
          continue;
        }
        const FieldResult field = json.read(text);
        switch (field.status) {
          case FieldStatus::kOk: text = field.text; break;
          case FieldStatus::kMalformed: skip(SkipReason::kMalformedJson, field.detail), ok = false; break;
          case FieldStatus::kInvalidUtf8: skip(SkipReason::kInvalidUtf8, field.detail), ok = false; break;
          case FieldStatus::kMissing: skip(SkipReason::kMissingField, field.detail), ok = false; break;
          case FieldStatus::kNotString: skip(SkipReason::kNotAString, field.detail), ok = false; break;
        }
      } else if (!valid_utf8(text)) {
        skip(SkipReason::kInvalidUtf8, "invalid UTF-8");
        ok = false;
      }
      if (ok && whitespace_only(text)) {
        skip(SkipReason::kEmpty, "");
      } else if (ok) {
        const int split = document_split(text, options_.valid_fraction);
        auto& tokens = out.tokens[static_cast<size_t>(split)];
        const size_t start = tokens.size();
        tokenizer_.encode_to(text, tokens, kPlainText);
        tokens.push_back(eos_);
        out.lengths[static_cast<size_t>(split)].push_back(static_cast<uint32_t>(tokens.size() - start));
        out.text_bytes[static_cast<size_t>(split)] += static_cast<int64_t>(text.size());
      }
    }
    if (options_.stop_at_problem && !out.problems.empty()) break;
  }
  return out;
}

}  // namespace loom
