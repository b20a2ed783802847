// A SentencePiece `.model` (LLaMA 2 style, and loom's own KJV tokenizers from spm_train) behind the
// Tokenizer interface. Text goes to SentencePiece as bytes, as it always did in loom; the checksum is
// the CRC-32 of the model file, so existing token files stay tied to it.
#pragma once
#include <memory>

#include "data/tokenizers/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;

  // add_special_tokens prepends bos, as Hugging Face's LlamaTokenizer does.
  void encode_to(std::string_view text, std::vector<int32_t>& ids, const EncodeOptions& options = {}) const override;
  // Control tokens (bos, eos, pad) decode to nothing, as in SentencePiece.
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  TokenizerType type() const override { return TokenizerType::kSentencePiece; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace loom
