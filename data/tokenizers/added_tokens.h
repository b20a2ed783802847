// Added and special tokens found in text before it is split and merged, with Hugging Face's rules:
// leftmost-longest match among all the tokens, then per token `single_word` (no word character on
// either side, else the match is dropped), `lstrip` / `rstrip` (the whitespace beside it belongs to
// the token). tiktoken's special tokens are the same with no flags. Whitespace and word characters are
// Unicode's (White_Space; Alphabetic, marks, decimal digits, connector punctuation, joiners), as Rust's
// regex \s and \w that Hugging Face uses.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false, lstrip = false, rstrip = false;
  bool normalized = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what is matched for tokens[i] (its content, or its normalized content).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }

  // Walks `text`: on_text(string_view) for each stretch between tokens (never empty), on_token(id) for
  // each token found. skip_special: special tokens are not looked for (they stay text).
  template <class OnText, class OnToken>
  void split(std::string_view text, bool skip_special, OnText&& on_text, OnToken&& on_token) const {
    size_t done = 0;  // text before this is handed out
    size_t search = 0;
    size_t start, end;
    int index;
    while (next_match(text, search, skip_special, start, end, index)) {
      search = end;
      const AddedToken& token = tokens_[static_cast<size_t>(index)];
      if (token.single_word && !stands_alone(text, start, end)) continue;
      if (token.lstrip) start = std::max(done, whitespace_before(text, start));
      if (token.rstrip) end = whitespace_after(text, end);
      if (start > done) on_text(text.substr(done, start - done));
      on_token(token.id);
      done = search = end;
    }
    if (done < text.size()) on_text(text.substr(done));
  }

 private:
  // The leftmost, then longest, token pattern at or after `from`.
  bool next_match(std::string_view text, size_t from, bool skip_special, size_t& start, size_t& end, int& index) const;
  static bool stands_alone(std::string_view text, size_t start, size_t end);
  static size_t whitespace_before(std::string_view text, size_t start);
  static size_t whitespace_after(std::string_view text, size_t end);

  std::vector<AddedToken> tokens_;
  std::vector<std::string> patterns_;
  std::vector<std::vector<int>> by_first_byte_;  // 256 lists of token indices, longest pattern first
};

}  // namespace loom
