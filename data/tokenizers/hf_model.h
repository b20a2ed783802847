// The model of a Hugging Face tokenizer.json: what turns one pre-tokenized piece into ids. BPE
// (hf_bpe.h) and WordPiece (hf_wordpiece.h) implement it; HfTokenizer picks one by the file's
// model.type.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class StringTable;

class HfModel {
 public:
  virtual ~HfModel() = default;
  // Appends the ids of one pre-tokenized piece.
  virtual void encode(std::string_view piece, std::vector<int32_t>& out) const = 0;
  // The id of a vocabulary entry as the file writes it; -1 when absent.
  virtual int32_t token_id(std::string_view vocab_text) const = 0;
  // Vocabulary entries by id as the file writes them ("" for ids it does not use).
  virtual const std::vector<std::string>& tokens() const = 0;
};

// model.vocab of a tokenizer.json (both models have one): text -> id into `vocab`, and by id the text into
// `tokens` ("" for ids it leaves out). A damaged id is a loom::Error naming `where`.
void read_hf_vocab(const nlohmann::json& model, const std::string& where, StringTable& vocab,
                   std::vector<std::string>& tokens);

}  // namespace loom
