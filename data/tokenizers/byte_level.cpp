#include "data/tokenizers/byte_level.h"

#include "data/tokenizers/utf8.h"

namespace loom::byte_level {
namespace {

struct Alphabet {
  std::array<char32_t, 256> char_of{};
  std::array<int, 324> byte_of{};  // code points 0..323 cover the whole alphabet

  Alphabet() {
    byte_of.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char_of[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      byte_of[char_of[b]] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t char_of(unsigned char b) { return alphabet().char_of[b]; }

int byte_of(char32_t c) { return c < alphabet().byte_of.size() ? alphabet().byte_of[c] : -1; }

std::optional<std::string> to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const int b = byte_of(utf8::next(text, i));
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
  }
  return out;
}

std::string from_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, char_of(b));
  return out;
}

}  // namespace loom::byte_level
