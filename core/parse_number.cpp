#include "core/parse_number.h"

#include <cmath>

namespace loom {
namespace {

template <class T, class Convert>
std::optional<T> parse_whole(const std::string& text, Convert convert) {
  size_t used = 0;
  T value{};
  try {
    value = convert(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> parse_int64(const std::string& text) {
  return parse_whole<int64_t>(text, [](const std::string& s, size_t* used) { return std::stoll(s, used); });
}

std::optional<double> parse_double(const std::string& text) {
  auto v = parse_whole<double>(text, [](const std::string& s, size_t* used) { return std::stod(s, used); });
  if (v && !std::isfinite(*v)) return std::nullopt;
  return v;
}

}  // namespace loom
