// The character classes of BERT's normalizer and pre-tokenizer as the `tokenizers` library computes them:
// its "other" (control, format, private use), punctuation and non-spacing mark tests read the tables of
// Unicode 8.0 (the unicode_categories crate), so a character assigned since is none of them there, and the
// few whose category changed since keep their 8.0 one. Whitespace is Rust's char::is_whitespace: today's White_Space.
#pragma once

namespace loom::bert_chars {

bool is_white_space(char32_t c);
// Cc, Cf or Co in Unicode 8.0 (tab, newline and carriage return included).
bool is_other(char32_t c);
// ASCII punctuation, or P* in Unicode 8.0.
bool is_punctuation(char32_t c);
// Mn in Unicode 8.0 (what strip_accents removes after NFD).
bool is_nonspacing_mark(char32_t c);
// The CJK Unified Ideographs blocks, their extensions and compatibility forms (BERT's "Chinese characters").
bool is_cjk_ideograph(char32_t c);

}  // namespace loom::bert_chars
