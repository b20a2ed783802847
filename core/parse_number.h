// Whole-string number parsing shared by the config and the command line: "12" is 12, "12x" is nothing.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace loom {

std::optional<int64_t> parse_int64(const std::string& text);
std::optional<double> parse_double(const std::string& text);  // finite values only

}  // namespace loom
