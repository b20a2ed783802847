// The split regexes of byte-level BPE tokenizers (GPT-2's, cl100k's, Llama 3's ...), through PCRE2 with
// Unicode classes and JIT. Two dialects, as the references compile them: tiktoken's (Rust regex and
// fancy-regex: `$` is the end of the text) and Hugging Face's (Oniguruma, Ruby syntax: `^` and `$`
// are line anchors). In both, `\s` also matches U+0085 (NEL), which PCRE2's Unicode `\s` leaves out, and
// `\w` is Unicode's word class, marks and joiners included, which PCRE2's `\w` leaves out; a `\S` or `\W`
// inside a character class keeps PCRE2's meaning.
// Matching is thread-safe: each thread has its own match data and JIT stack.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace loom {

enum class RegexDialect { kTiktoken, kHuggingFace };

class SplitRegex {
 public:
  // Throws loom::Error naming `where` and PCRE2's message when the pattern does not compile.
  SplitRegex(const std::string& pattern, RegexDialect dialect, const std::string& where);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Calls f(start, end) for each non-empty match of `text` (valid UTF-8), leftmost first, not overlapping.
  template <class F>
  void for_each_match(std::string_view text, F&& f) const {
    size_t offset = 0, start = 0, end = 0;
    while (offset <= text.size() && find(text, offset, start, end)) {
      if (end > start) {
        f(start, end);
        offset = end;
      } else {
        offset = start + 1;  // an empty match: try again one character on
        while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
      }
    }
  }

 private:
  // The first match at or after `offset`; false when there is none.
  bool find(std::string_view text, size_t offset, size_t& start, size_t& end) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// The pattern with `\s` widened to U+0085 (see above) and `\w` (`\W` outside a class) made Unicode's word
// class as both references have it: letters and other alphabetics, marks, decimal digits, connector
// punctuation and the joiners. Exposed for the unit tests.
std::string with_reference_classes(const std::string& pattern);

}  // namespace loom
