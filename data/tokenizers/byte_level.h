// GPT-2's byte-level alphabet: every byte 0..255 stands for one printable code point (printable
// Latin-1 bytes for themselves, the others for U+0100 upwards), as Hugging Face's ByteLevel
// pre-tokenizer and decoder write vocabularies. loom tokenizes raw bytes and uses this only to read
// such vocabularies and to decode.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace loom::byte_level {

// The code point byte b stands for.
char32_t char_of(unsigned char b);

// The byte code point c stands for; -1 when c is not in the alphabet.
int byte_of(char32_t c);

// "Ġhello" -> " hello"; nullopt when a character is outside the alphabet. `text` must be valid UTF-8.
std::optional<std::string> to_bytes(std::string_view text);

// " hello" -> "Ġhello".
std::string from_bytes(std::string_view bytes);

}  // namespace loom::byte_level
