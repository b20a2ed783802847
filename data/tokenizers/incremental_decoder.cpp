#include "data/tokenizers/incremental_decoder.h"

#include <algorithm>

#include "core/strings.h"

namespace loom {
namespace {

// UTF-8 of U+FFFD, what tokenizers decode a cut-off character to.
const std::string kReplacement = "\xEF\xBF\xBD";
// Tokens held back at most before their text is shown as it decodes, and shown tokens kept as context at
// most while none is an anchor: bounds the work per token.
constexpr size_t kMaxHeld = 32;

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, const std::vector<int32_t>& context)
    : tokenizer_(tokenizer) {
  const size_t keep = std::min(context.size(), kMaxHeld);
  for (size_t i = context.size() - keep; i < context.size(); ++i) push(context[i]);
  shown_ = ids_.size();
  trim_context();
}

void IncrementalDecoder::push(int32_t id) {
  // An anchor decodes on its own to visible text, whole characters only: a decode that starts with it
  // renders it (and what follows) as a decode of everything before it would. A whitespace-only piece may
  // not be (SentencePiece drops leading spaces of a decode), nor a byte of a longer character.
  const std::string alone = decode_lines(tokenizer_, std::vector<int32_t>{id});
  const bool visible = alone.find_first_not_of(" \t\n\r") != std::string::npos;
  ids_.push_back(id);
  anchor_.push_back(visible && alone.find(kReplacement) == std::string::npos);
}

void IncrementalDecoder::trim_context() {
  size_t from = 0;
  for (size_t i = shown_; i-- > 0;)
    if (anchor_[i]) {
      from = i;
      break;
    }
  if (from == 0 && shown_ > kMaxHeld) from = shown_ - kMaxHeld;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(from));
  anchor_.erase(anchor_.begin(), anchor_.begin() + static_cast<std::ptrdiff_t>(from));
  shown_ -= from;
}

std::string IncrementalDecoder::add(int32_t id) {
  push(id);
  return take(/*force=*/ids_.size() - shown_ >= kMaxHeld);
}

std::string IncrementalDecoder::finish() { return shown_ == ids_.size() ? "" : take(/*force=*/true); }

std::string IncrementalDecoder::take(bool force) {
  const std::string before =
      decode_lines(tokenizer_, std::vector<int32_t>(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(shown_)));
  const std::string now = decode_lines(tokenizer_, ids_);
  const bool prefixed = now.size() >= before.size() && now.compare(0, before.size(), before) == 0;
  if (!force && (!prefixed || now.size() == before.size() || ends_with(now, kReplacement))) return "";
  shown_ = ids_.size();
  trim_context();
  return prefixed ? now.substr(before.size()) : now;
}

}  // namespace loom
