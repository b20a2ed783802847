// Text of a token stream as it grows, for printing tokens as they are sampled: each call returns only the
// new text, and the concatenation of everything returned equals decode_lines (data/tokenizers/tokenizer.h) of all the
// tokens: the tokenizer's decode with EOS as a line break.
// New tokens are decoded together with the shown tokens back to the last anchor (a token that decodes on
// its own to visible, whole characters), so a tokenizer that drops spaces at the start of a decode
// (SentencePiece) or splits a character over several byte tokens still adds up: text that ends in an
// incomplete UTF-8 sequence (decoded as U+FFFD) is held back until a token completes it, or until finish().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizers/tokenizer.h"

namespace loom {

class IncrementalDecoder {
 public:
  // `context`: tokens already shown (a prompt); their text is not returned again.
  IncrementalDecoder(const Tokenizer& tokenizer, const std::vector<int32_t>& context = {});

  // The text that `id` adds (possibly empty, while a character is incomplete).
  std::string add(int32_t id);
  // Whatever is held back, decoded as it is.
  std::string finish();

 private:
  void push(int32_t id);
  // Drops the shown tokens before the last shown anchor (keeping at most a bounded context without one).
  void trim_context();
  // The text of ids_ past that of its shown tokens, once it is complete (or `force`); "" while held back.
  std::string take(bool force);

  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;  // shown tokens from the last anchor on, then the tokens not yet shown
  std::vector<bool> anchor_;  // per token of ids_
  size_t shown_ = 0;          // ids_[0, shown_) are already shown
};

}  // namespace loom
