// UTF-8 for the tokenizers: the length of the well-formed sequence at a position, invalid input made
// valid the way Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do (each
// maximal ill-formed subpart becomes one U+FFFD), and code point reading and writing.
// Not a general Unicode library: normalization and character classes are ICU's and PCRE2's.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace loom::utf8 {

constexpr char32_t kReplacement = 0xFFFD;

// Bytes of the well-formed sequence starting at s[i]; 0 when s[i] starts none.
size_t sequence_length(std::string_view s, size_t i);

bool is_valid(std::string_view s);

// s with every maximal ill-formed subpart replaced by U+FFFD (s itself when valid).
std::string replace_invalid(std::string_view s);

// The code point of the well-formed sequence at s[i]; i moves past it. s must be valid there.
char32_t next(std::string_view s, size_t& i);

void append(std::string& out, char32_t code_point);

// Unicode's White_Space property (ICU's), as Rust's char::is_whitespace.
bool is_white_space(char32_t code_point);

}  // namespace loom::utf8
