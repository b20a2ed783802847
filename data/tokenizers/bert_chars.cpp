#include "data/tokenizers/bert_chars.h"

#include <unicode/uchar.h>

namespace loom::bert_chars {
namespace {

bool assigned_by_unicode_8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] < 8 || (age[0] == 8 && age[1] == 0);
}

}  // namespace

bool is_white_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_other(char32_t c) {
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return (type == U_CONTROL_CHAR || type == U_FORMAT_CHAR || type == U_PRIVATE_USE_CHAR) && assigned_by_unicode_8(c);
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
  if (c == 0x166D || c == 0x111C9) return true;  // Po in Unicode 8.0 (So and Mn today)
  return u_ispunct(static_cast<UChar32>(c)) && assigned_by_unicode_8(c);
}

bool is_nonspacing_mark(char32_t c) {
  if (c == 0x1734) return true;  // Mn in Unicode 8.0 (Mc today)
  if (c == 0x1885 || c == 0x1886 || c == 0xA9BD || c == 0x111C9) return false;  // Lo, Mc, Po in 8.0
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK && assigned_by_unicode_8(c);
}

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace loom::bert_chars
