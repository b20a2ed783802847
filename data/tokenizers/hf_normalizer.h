// The normalizers of a Hugging Face tokenizer.json, applied to each stretch of text between added
// tokens before it is split: NFC, NFD, NFKC, NFKD (ICU), Lowercase (per code point, full mappings, as
// Rust's char::to_lowercase), Strip, StripAccents, Replace, Prepend, BertNormalizer (clean_text,
// handle_chinese_chars, strip_accents, lowercase) and a Sequence of them. Any other
// type is refused at load, naming it.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class SplitRegex;

class HfNormalizer {
 public:
  // `spec` is the file's "normalizer" (null: none); `where` names the file in errors.
  HfNormalizer(const nlohmann::json& spec, const std::string& where);
  ~HfNormalizer();

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

  struct Step;

 private:
  std::vector<std::unique_ptr<Step>> steps_;
};

// The string of a {"String": s} or {"Regex": r} pattern; `is_regex` says which. Throws naming `where`.
std::string hf_pattern(const nlohmann::json& pattern, bool& is_regex, const std::string& where);

// A regex that matches `text` literally.
std::string regex_escape(std::string_view text);

// Every match of `regex` in `text` replaced by `content`.
std::string replace_all(const SplitRegex& regex, std::string_view text, std::string_view content);

}  // namespace loom
