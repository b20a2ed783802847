// The WordPiece model of a Hugging Face tokenizer.json (BERT's): each pre-tokenized word is cut greedily
// into the longest vocabulary entries from the left, every piece after the first looked up with the
// continuing_subword_prefix ("##"); a word with a stretch no entry covers, or longer than
// max_input_chars_per_word characters, is the one unk_token. As the `tokenizers` library does it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/hf_model.h"
#include "data/tokenizers/string_table.h"

namespace loom {

class HfWordPieceModel : public HfModel {
 public:
  HfWordPieceModel(const nlohmann::json& model, const std::string& where);

  void encode(std::string_view word, std::vector<int32_t>& out) const override;
  int32_t token_id(std::string_view vocab_text) const override { return vocab_.find(vocab_text); }
  const std::vector<std::string>& tokens() const override { return tokens_; }

 private:
  StringTable vocab_;
  std::vector<std::string> tokens_;
  std::string prefix_;  // continuing_subword_prefix
  int64_t max_chars_ = 100;
  int32_t unk_ = -1;
};

}  // namespace loom
