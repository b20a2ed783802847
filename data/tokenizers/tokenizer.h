// The one tokenizer interface of loom: text <-> token ids, the special tokens (bos/eos/pad by id, any
// special token by text), the vocabulary size, and a checksum that ties token files to the tokenizer
// that made them. Implementations: SentencePiece `.model` files (sentencepiece_tokenizer.h), Hugging
// Face `tokenizer.json` byte-level BPE (hf_tokenizer.h) and tiktoken rank files (tiktoken_tokenizer.h);
// load_tokenizer() picks one from the file's content or tokenizer.type.
// encode and decode are const and thread-safe (per-thread caches), so `loom prepare` can share one.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace loom {


struct EncodeOptions {
  // Special tokens written in the text ("<|endoftext|>") become their ids, as Hugging Face's encode
  // does (and tiktoken's encode(allowed_special="all")); false: they are plain text, as tiktoken's
  // encode_ordinary (and Hugging Face with encode_special_tokens=True). Non-special added tokens of a
  // tokenizer.json match either way. SentencePiece has no such tokens.
  bool special_in_text = true;
  // Add what the tokenizer adds around a sequence: a tokenizer.json's post-processor (Llama 3's
  // <|begin_of_text|>, RoBERTa's <s> ... </s>), SentencePiece's bos; tiktoken adds nothing. This is
  // Hugging Face's add_special_tokens=True. loom's token files add none of it (EOS ends each document).
  bool add_special_tokens = false;
};

struct SpecialToken {
  std::string text;
  int32_t id;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Invalid UTF-8 is first replaced as Python's bytes.decode("utf-8", "replace") does (one U+FFFD per
  // maximal ill-formed subpart), except by SentencePiece, which takes the bytes as they are.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const {
    std::vector<int32_t> ids;
    encode_to(text, ids, options);
    return ids;
  }
  // The same, appended to `ids` (a shard's buffer: no vector per document).
  virtual void encode_to(std::string_view text, std::vector<int32_t>& ids, const EncodeOptions& options = {}) const = 0;
  // The reference's decode with special tokens kept as their text (Hugging Face skip_special_tokens=False);
  // bytes that do not form UTF-8 become U+FFFD. Throws for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // One more than the largest id (the embedding rows a model needs).
  virtual int64_t vocab_size() const = 0;
  virtual TokenizerType type() const = 0;
  const char* type_name() const { return enum_name(type()); }

  // CRC-32 of the file, and for tiktoken of the pattern and special tokens too (they change the ids).
  uint32_t checksum() const { return checksum_; }
  const std::string& path() const { return path_; }

  std::optional<int32_t> bos_id() const { return bos_; }
  std::optional<int32_t> eos_id() const { return eos_; }
  std::optional<int32_t> pad_id() const { return pad_; }
  // Every special token (control tokens, added tokens marked special), ordered by id.
  const std::vector<SpecialToken>& special_tokens() const { return special_; }
  std::optional<int32_t> special_id(std::string_view text) const;
  bool is_special(int32_t id) const;

  // The id that ends a document in loom's token files; throws naming the tokenizer when it has none.
  int32_t require_eos() const;

 protected:
  Tokenizer(std::string path, uint32_t checksum) : path_(std::move(path)), checksum_(checksum) {}
  void set_checksum(uint32_t checksum) { checksum_ = checksum; }
  // Sets the special tokens; roles left unset are taken from well-known texts (<|endoftext|>, </s> ...).
  void set_special_tokens(std::vector<SpecialToken> tokens, std::optional<int32_t> bos, std::optional<int32_t> eos,
                          std::optional<int32_t> pad);

 private:
  std::string path_;
  uint32_t checksum_;
  std::vector<SpecialToken> special_;
  std::optional<int32_t> bos_, eos_, pad_;
};

// The tokenizer config.tokenizer describes (model, type, pattern, special_tokens). Throws loom::Error
// naming the file for a missing, unreadable or unsupported file; ConfigError for bad settings.
std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerConfig& config);

// Ids in a tokenizer file may leave holes, but at most this many past its entries: a damaged id must not
// size a table (check_token_id throws loom::Error naming `what`).
constexpr int64_t kMaxTokenIdGap = 1 << 20;
void check_token_id(int64_t id, int64_t entries, const std::string& what);

// The type of the file's content: JSON -> huggingface, base64 + rank lines -> tiktoken, else sentencepiece.
TokenizerType detect_tokenizer_type(const std::string& path);

// Ids as lines of text, the way loom's token files hold documents: EOS ends a line (decoded as '\n'),
// ids outside the tokenizer's vocabulary (a model's padded rows) are dropped. What loom generate, translate
// and eval print of a model's tokens.
std::string decode_lines(const Tokenizer& tokenizer, const std::vector<int32_t>& ids);
std::string decode_lines(const Tokenizer& tokenizer, const std::vector<int64_t>& ids);

}  // namespace loom
