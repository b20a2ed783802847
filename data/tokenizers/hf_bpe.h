// The BPE model of a Hugging Face tokenizer.json: vocabulary, merges ranked by their order (either
// format: "a b" strings or [a, b] pairs), ignore_merges, unk_token with fuse_unk, byte_fallback
// (<0xXX> tokens). On a byte-level tokenizer (ByteLevel pre-tokenizer) it works on raw bytes, the
// vocabulary read back through GPT-2's byte alphabet; otherwise on the text's characters. Merges are
// looked up by (id, id) in a hash table; whole pieces are cached per thread.
// Refused at load: dropout, continuing_subword_prefix and end_of_word_suffix (word-piece style BPE).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/hf_model.h"
#include "data/tokenizers/string_table.h"

namespace loom {

class HfBpeModel : public HfModel {
 public:
  HfBpeModel(const nlohmann::json& model, bool byte_level, const std::string& where);

  // Appends the ids of one pre-tokenized piece (raw bytes when byte-level, else text).
  void encode(std::string_view piece, std::vector<int32_t>& out) const override;

  // The id of a vocabulary entry as the file writes it ("Ġthe"); -1 when absent.
  int32_t token_id(std::string_view vocab_text) const override { return vocab_.find(vocab_text); }
  // Vocabulary entries by id as the file writes them ("" for ids it does not use).
  const std::vector<std::string>& tokens() const override { return tokens_; }

 private:
  // Appends the initial symbols of the character (or byte) piece[start, end).
  void add_symbol(std::string_view piece, uint32_t start, uint32_t end) const;

  bool byte_level_;
  uint64_t instance_;
  StringTable vocab_;        // as written in the file -> id
  StringTable pieces_;       // what encode() sees (raw bytes when byte-level) -> id
  std::vector<std::string> tokens_;
  PairTable merges_;
  int32_t byte_ids_[256];    // byte-level: the id of each single byte, -1 if absent
  int32_t byte_fallback_ids_[256];  // <0xXX>, -1 if absent or no byte_fallback
  int32_t unk_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

}  // namespace loom
