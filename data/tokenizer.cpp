#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {

Tokenizer::Tokenizer(const std::filesystem::path& model_path)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  LOOM_CHECK(std::filesystem::is_regular_file(model_path), model_path.string(),
             ": no tokenizer model there (tokenizer.model; scripts/prepare_kjv.sh makes one)");
  const auto status = processor_->Load(model_path.string());
  LOOM_CHECK(status.ok(), model_path.string(), ": not a SentencePiece model: ", status.ToString());
  checksum_ = crc32_file(model_path);
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  LOOM_CHECK(status.ok(), "tokenizer: ", status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  // EOS separates lines in loom's token files, so it decodes to a newline.
  std::string out;
  std::vector<int> piece;
  auto flush = [&] {
    std::string text;
    const auto status = processor_->Decode(piece, &text);
    LOOM_CHECK(status.ok(), "tokenizer: ", status.ToString());
    out += text;
    piece.clear();
  };
  for (int32_t id : ids) {
    if (id == eos_id()) {
      flush();
      out += '\n';
    } else if (id >= 0 && id < vocab_size()) {
      piece.push_back(id);
    }
  }
  flush();
  return out;
}

int64_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int32_t Tokenizer::eos_id() const { return processor_->eos_id(); }
int32_t Tokenizer::bos_id() const { return processor_->bos_id(); }
int32_t Tokenizer::pad_id() const { return processor_->pad_id(); }

}  // namespace loom
