#include "data/tokenizers/hf_normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include "core/error.h"
#include "data/tokenizers/bert_chars.h"
#include "data/tokenizers/split_regex.h"
#include "data/tokenizers/utf8.h"

namespace loom {

struct HfNormalizer::Step {
  enum Kind { kUnicode, kLowercase, kStrip, kStripAccents, kReplace, kPrepend, kBertClean } kind;
  const icu::Normalizer2* form = nullptr;  // kUnicode
  bool left = false, right = false;        // kStrip
  bool clean_text = false, handle_chinese = false;  // kBertClean
  bool bert_marks = false;  // kStripAccents: the marks of bert_chars.h (BertNormalizer), else today's Mn
  std::unique_ptr<SplitRegex> regex;       // kReplace
  std::string content;                     // kReplace, kPrepend

  std::string apply(std::string_view text) const;
};

namespace {

bool all_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::string normalize(const icu::Normalizer2& form, std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (form.isNormalized(in, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = form.normalize(in, status);
  LOOM_CHECK(U_SUCCESS(status), "ICU normalization failed: ", u_errorName(status));
  std::string utf8;
  out.toUTF8String(utf8);
  return utf8;
}

void append_lowercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  UChar in[2], lower[8];
  int32_t length = 0;
  UBool error = false;
  U16_APPEND(in, length, 2, static_cast<UChar32>(c), error);
  (void)error;  // a valid code point always fits in two UTF-16 units
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = u_strToLower(lower, 8, in, length, "", &status);
  LOOM_CHECK(U_SUCCESS(status), "ICU lowercase failed: ", u_errorName(status));
  for (int32_t i = 0; i < n;) {
    UChar32 cp;
    U16_NEXT(lower, i, n, cp);
    utf8::append(out, static_cast<char32_t>(cp));
  }
}

// BertNormalizer's clean_text: drops NUL, U+FFFD and the "other" characters (bert_chars.h) but tab, newline and
// carriage return, and turns whitespace into a space; handle_chinese_chars: a space either side of each CJK
// ideograph.
std::string bert_clean(std::string_view text, bool clean_text, bool handle_chinese) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t c = utf8::next(text, i);
    if (clean_text) {
      const bool line_space = c == '\t' || c == '\n' || c == '\r';
      if (c == 0 || c == utf8::kReplacement || (bert_chars::is_other(c) && !line_space)) continue;
      if (line_space || bert_chars::is_white_space(c)) c = ' ';
    }
    if (handle_chinese && bert_chars::is_cjk_ideograph(c)) {
      out += ' ';
      utf8::append(out, c);
      out += ' ';
    } else {
      utf8::append(out, c);
    }
  }
  return out;
}

}  // namespace

std::string HfNormalizer::Step::apply(std::string_view text) const {
  std::string out;
  switch (kind) {
    case kUnicode:
      return all_ascii(text) ? std::string(text) : normalize(*form, text);
    case kLowercase:
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) append_lowercase(out, utf8::next(text, i));
      return out;
    case kStrip: {
      size_t begin = 0, end = text.size();
      while (left && begin < end) {
        size_t i = begin;
        if (!utf8::is_white_space(utf8::next(text, i))) break;
        begin = i;
      }
      while (right && end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!utf8::is_white_space(utf8::next(text, i))) break;
        end = start;
      }
      return std::string(text.substr(begin, end - begin));
    }
    case kStripAccents:
      for (size_t i = 0; i < text.size();) {
        const size_t at = i;
        const char32_t c = utf8::next(text, i);
        const bool mark = bert_marks ? bert_chars::is_nonspacing_mark(c)
                                     : u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK;
        if (!mark) out.append(text.substr(at, i - at));
      }
      return out;
    case kReplace:
      return replace_all(*regex, text, content);
    case kPrepend:
      return text.empty() ? std::string() : content + std::string(text);
    case kBertClean:
      return bert_clean(text, clean_text, handle_chinese);
  }
  return std::string(text);
}

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ ").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string hf_pattern(const nlohmann::json& pattern, bool& is_regex, const std::string& where) {
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    is_regex = false;
    return pattern["String"].get<std::string>();
  }
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    is_regex = true;
    return pattern["Regex"].get<std::string>();
  }
  throw Error(where + ": a pattern must be {\"String\": ...} or {\"Regex\": ...}, got " + pattern.dump());
}

std::string replace_all(const SplitRegex& regex, std::string_view text, std::string_view content) {
  std::string out;
  size_t done = 0;
  regex.for_each_match(text, [&](size_t start, size_t end) {
    out.append(text.substr(done, start - done));
    out.append(content);
    done = end;
  });
  out.append(text.substr(done));
  return out;
}

namespace {

void add_normalizer_steps(const nlohmann::json& spec, const std::string& where,
               std::vector<std::unique_ptr<HfNormalizer::Step>>& steps) {
  if (spec.is_null()) return;
  const std::string type = spec.value("type", "");
  using Step = HfNormalizer::Step;
  auto step = std::make_unique<Step>();
  UErrorCode status = U_ZERO_ERROR;
  if (type == "Sequence") {
    for (const auto& s : spec.at("normalizers")) add_normalizer_steps(s, where, steps);
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step->kind = Step::kUnicode;
    step->form = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                 : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                 : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                  : icu::Normalizer2::getNFKDInstance(status);
    LOOM_CHECK(U_SUCCESS(status), "ICU ", type, " is not available: ", u_errorName(status));
  } else if (type == "Lowercase") {
    step->kind = Step::kLowercase;
  } else if (type == "Strip") {
    step->kind = Step::kStrip;
    step->left = spec.value("strip_left", true);
    step->right = spec.value("strip_right", true);
  } else if (type == "StripAccents") {
    step->kind = Step::kStripAccents;
  } else if (type == "Replace") {
    step->kind = Step::kReplace;
    bool is_regex = false;
    const std::string pattern = hf_pattern(spec.at("pattern"), is_regex, where);
    step->regex = std::make_unique<SplitRegex>(is_regex ? pattern : regex_escape(pattern), RegexDialect::kHuggingFace,
                                               where + " (normalizer Replace)");
    step->content = spec.at("content").get<std::string>();
  } else if (type == "BertNormalizer") {  // clean and space CJK, then (NFD and) strip accents, then lowercase
    const bool lowercase = spec.value("lowercase", true);
    const bool strip_accents = spec.contains("strip_accents") && !spec["strip_accents"].is_null()
                                   ? spec["strip_accents"].get<bool>()
                                   : lowercase;  // null: as lowercase
    step->kind = Step::kBertClean;
    step->clean_text = spec.value("clean_text", true);
    step->handle_chinese = spec.value("handle_chinese_chars", true);
    steps.push_back(std::move(step));
    if (strip_accents) {
      add_normalizer_steps({{"type", "NFD"}}, where, steps);
      add_normalizer_steps({{"type", "StripAccents"}}, where, steps);
      steps.back()->bert_marks = true;
    }
    if (lowercase) add_normalizer_steps({{"type", "Lowercase"}}, where, steps);
    return;
  } else if (type == "Prepend") {
    step->kind = Step::kPrepend;
    step->content = spec.at("prepend").get<std::string>();
  } else {
    throw Error(where + ": normalizer '" + type +
                "' is not implemented by loom (it reads NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, "
                "Replace, Prepend, BertNormalizer and Sequence)");
  }
  steps.push_back(std::move(step));
}

}  // namespace

HfNormalizer::HfNormalizer(const nlohmann::json& spec, const std::string& where) { add_normalizer_steps(spec, where, steps_); }
HfNormalizer::~HfNormalizer() = default;

std::string HfNormalizer::apply(std::string_view text) const {
  std::string current(text);
  for (const auto& step : steps_) current = step->apply(current);
  return current;
}

}  // namespace loom
