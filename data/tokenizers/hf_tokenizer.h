// A Hugging Face `tokenizer.json` with a BPE model (GPT-2, RoBERTa, Llama 3, Qwen 2 style) or a WordPiece
// model (BERT's) behind the Tokenizer interface, encoding as the `tokenizers` library does: added tokens that match the raw text
// (normalized: false) are cut out first, each stretch between them is normalized, added tokens that
// match normalized text are cut out next, the rest is pre-tokenized into pieces and each piece merged
// by the model (hf_model.h). Roles (bos/eos/pad) come from tokenizer_config.json beside the file when there is
// one, else from the post-processor's template (bos) and the usual token texts. The file's truncation
// and padding settings are not applied: loom cuts and packs sequences itself.
// Types loom does not implement (Unigram and WordLevel models, other normalizers,
// pre-tokenizers, decoders or post-processors) are refused at load, naming the type.
#pragma once
#include <memory>

#include "data/tokenizers/added_tokens.h"
#include "data/tokenizers/hf_model.h"
#include "data/tokenizers/hf_decoder.h"
#include "data/tokenizers/hf_normalizer.h"
#include "data/tokenizers/hf_pre_tokenizer.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);
  ~HfTokenizer() override;

  void encode_to(std::string_view text, std::vector<int32_t>& ids, const EncodeOptions& options = {}) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  TokenizerType type() const override { return TokenizerType::kHuggingFace; }

 private:
  void encode_normalized(std::string_view text, bool skip_special, std::vector<int32_t>& out) const;
  void encode_pieces(std::string_view text, std::vector<int32_t>& out) const;
  int32_t token_id(std::string_view text) const;

  std::unique_ptr<HfNormalizer> normalizer_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  std::unique_ptr<HfModel> model_;
  std::unique_ptr<HfDecoder> decoder_;
  HfPostProcessor post_;
  AddedTokenMatcher raw_added_, normalized_added_;
  std::vector<std::string> added_text_;  // id -> added token content ("" when not an added token)
  int64_t vocab_size_ = 0;
};

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);

}  // namespace loom
