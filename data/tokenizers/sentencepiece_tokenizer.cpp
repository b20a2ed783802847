#include "data/tokenizers/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {
namespace {

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_model(const std::string& path) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(path);
  LOOM_CHECK(status.ok(), path, ": not a SentencePiece model (", status.ToString(),
             "), nor a Hugging Face tokenizer.json (JSON) or a .tiktoken rank file (base64 and rank lines)");
  return processor;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : Tokenizer(path, crc32_file(path)), processor_(load_model(path)) {
  std::vector<SpecialToken> special;
  for (int id = 0; id < processor_->GetPieceSize(); ++id)
    if (processor_->IsControl(id) || processor_->IsUnknown(id)) special.push_back({processor_->IdToPiece(id), id});
  const auto role = [](int id) { return id >= 0 ? std::optional<int32_t>(id) : std::nullopt; };
  set_special_tokens(std::move(special), role(processor_->bos_id()), role(processor_->eos_id()),
                     role(processor_->pad_id()));
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::encode_to(std::string_view text, std::vector<int32_t>& out,
                                       const EncodeOptions& options) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  LOOM_CHECK(status.ok(), path(), ": ", status.ToString());
  if (options.add_special_tokens && bos_id()) out.push_back(*bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    LOOM_CHECK(id >= 0 && id < vocab_size(), path(), ": token id ", id, " is outside the vocabulary of ", vocab_size());
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  LOOM_CHECK(status.ok(), path(), ": ", status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

}  // namespace loom
