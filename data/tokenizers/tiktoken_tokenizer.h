// tiktoken rank files (`.tiktoken`: one "base64(token bytes) rank" per line; GPT-2's, cl100k's, Llama
// 3's tokenizer.model) behind the Tokenizer interface, encoding as tiktoken does: the text is split at
// special tokens, each stretch by the split pattern, and each piece is its own rank when it is a token,
// else byte pairs merged by the rank of the merged bytes. The file has no pattern and no special
// tokens: they come from tokenizer.pattern and tokenizer.special_tokens (tokenizer_presets.h).
#pragma once
#include <memory>
#include <string>

#include "core/config.h"
#include "data/tokenizers/added_tokens.h"
#include "data/tokenizers/split_regex.h"
#include "data/tokenizers/string_table.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {

class TiktokenTokenizer : public Tokenizer {
 public:
  // Throws ConfigError when the pattern is missing (listing the names) or a special token clashes
  // with a rank; loom::Error for a malformed file, naming the line.
  TiktokenTokenizer(const std::string& path, const std::string& pattern, const SpecialTokensSetting& special);

  void encode_to(std::string_view text, std::vector<int32_t>& ids, const EncodeOptions& options = {}) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  TokenizerType type() const override { return TokenizerType::kTiktoken; }

  // The ids of one piece of text (already split), appended to `out`: exposed for the unit tests.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  uint64_t instance_ = 0;
  StringTable ranks_;                 // token bytes -> rank
  std::vector<std::string> tokens_;   // id -> bytes (special tokens: their text)
  std::vector<bool> known_;           // id -> whether it is a rank or a special token
  std::unique_ptr<SplitRegex> pattern_;
  AddedTokenMatcher specials_;
  int64_t vocab_size_ = 0;
};

std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::string& path, const std::string& pattern,
                                                   const SpecialTokensSetting& special);

}  // namespace loom
