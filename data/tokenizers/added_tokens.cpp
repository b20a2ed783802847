#include "data/tokenizers/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cstring>

#include "data/tokenizers/utf8.h"

namespace loom {
namespace {

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) return true;
  const int8_t type = u_charType(u);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK || type == U_ENCLOSING_MARK ||
         type == U_DECIMAL_DIGIT_NUMBER || type == U_CONNECTOR_PUNCTUATION;
}

// The code point that ends at `end` (text[..end] is valid UTF-8), and where it starts.
char32_t previous_char(std::string_view text, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return utf8::next(text, i);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)), patterns_(std::move(patterns)), by_first_byte_(256) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!patterns_[i].empty()) by_first_byte_[static_cast<unsigned char>(patterns_[i][0])].push_back(static_cast<int>(i));
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return patterns_[static_cast<size_t>(a)].size() > patterns_[static_cast<size_t>(b)].size();
    });
}

bool AddedTokenMatcher::next_match(std::string_view text, size_t from, bool skip_special, size_t& start,
                                   size_t& end, int& index) const {
  for (size_t i = from; i < text.size(); ++i) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[i])];
    for (int c : candidates) {
      const std::string& p = patterns_[static_cast<size_t>(c)];
      if (skip_special && tokens_[static_cast<size_t>(c)].special) continue;
      if (p.size() <= text.size() - i && std::memcmp(text.data() + i, p.data(), p.size()) == 0) {
        start = i, end = i + p.size(), index = c;
        return true;
      }
    }
  }
  return false;
}

bool AddedTokenMatcher::stands_alone(std::string_view text, size_t start, size_t end) {
  size_t at;
  if (start > 0 && is_word_char(previous_char(text, start, at))) return false;
  if (end < text.size()) {
    size_t i = end;
    if (is_word_char(utf8::next(text, i))) return false;
  }
  return true;
}

size_t AddedTokenMatcher::whitespace_before(std::string_view text, size_t start) {
  size_t at;
  while (start > 0 && utf8::is_white_space(previous_char(text, start, at))) start = at;
  return start;
}

size_t AddedTokenMatcher::whitespace_after(std::string_view text, size_t end) {
  while (end < text.size()) {
    size_t i = end;
    if (!utf8::is_white_space(utf8::next(text, i))) break;
    end = i;
  }
  return end;
}

}  // namespace loom
