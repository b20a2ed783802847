// The pre-tokenizer of a Hugging Face tokenizer.json: Split (a regex or string, the five delimiter
// behaviours, invert), BertPreTokenizer (whitespace, then each punctuation character alone), Whitespace,
// WhitespaceSplit and ByteLevel (add_prefix_space, use_regex with GPT-2's pattern), alone or in a
// Sequence, ByteLevel last. It cuts a normalized stretch of text into the pieces the model encodes one by one.
// ByteLevel's mapping of bytes to printable characters is not done here: the BPE model works on raw
// bytes (hf_bpe.h). Other pre-tokenizers, and ByteLevel before another one, are refused at load.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/split_regex.h"

namespace loom {

// text[start, end), with a space in front when ByteLevel's add_prefix_space gave it one.
struct TextPiece {
  uint32_t start, end;
  bool space_before;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class HfPreTokenizer {
 public:
  HfPreTokenizer(const nlohmann::json& spec, const std::string& where);
  ~HfPreTokenizer();

  // Whether the chain ends in ByteLevel: the BPE model then works on bytes.
  bool byte_level() const { return byte_level_; }

  // The pieces of `text`, in order, appended to `out` (cleared first).
  void split(std::string_view text, std::vector<TextPiece>& out) const;

 private:
  struct SplitStep {
    std::unique_ptr<SplitRegex> regex;        // the matches; null: each character is_delimiter accepts
    bool (*is_delimiter)(char32_t) = nullptr;
    SplitBehavior behavior;
    bool invert;
  };
  void add(const nlohmann::json& spec, const std::string& where);

  std::vector<SplitStep> splits_;
  bool byte_level_ = false;
  bool add_prefix_space_ = false;
  std::unique_ptr<SplitRegex> byte_level_regex_;  // null: use_regex false
};

// The spans of one Split step over text[start, end): exposed for the unit tests.
void split_spans(const SplitRegex& regex, SplitBehavior behavior, bool invert, std::string_view text, uint32_t start,
                 uint32_t end, std::vector<TextPiece>& out);

// GPT-2's split pattern, as Hugging Face's ByteLevel pre-tokenizer spells it.
extern const char* const kByteLevelPattern;

}  // namespace loom
