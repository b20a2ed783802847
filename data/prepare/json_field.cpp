#include "data/prepare/json_field.h"

#include <simdjson.h>

#include "core/error.h"

namespace loom {
namespace {

// A parser keeps the capacity of the longest line it parsed; lines longer than this get a parser of
// their own, so that one huge record does not hold memory for the rest of the run.
constexpr size_t kKeptCapacity = 4 << 20;

std::string type_name(simdjson::dom::element_type type) {
  using T = simdjson::dom::element_type;
  switch (type) {
    case T::ARRAY: return "an array";
    case T::OBJECT: return "an object";
    case T::INT64:
    case T::UINT64:
    case T::DOUBLE: return "a number";
    case T::STRING: return "a string";
    case T::BOOL: return "true/false";
    case T::NULL_VALUE: return "null";
  }
  return "an unknown value";
}

std::string key_list(const simdjson::dom::object& object) {
  std::string keys;
  size_t n = 0;
  for (const auto field : object) {
    if (n++ == 10) return keys + ", ...";
    keys += (keys.empty() ? "'" : ", '") + std::string(field.key) + "'";
  }
  return keys.empty() ? "none" : keys;
}

}  // namespace

const size_t JsonFieldReader::kJsonPadding = simdjson::SIMDJSON_PADDING;

struct JsonFieldReader::Parser {
  simdjson::dom::parser dom;
  std::unique_ptr<simdjson::dom::parser> big;  // the last line past kKeptCapacity: freed at the next read
};

JsonFieldReader::JsonFieldReader(const std::string& dotted_path)
    : parser_(std::make_unique<Parser>()), dotted_(dotted_path) {
  size_t start = 0;
  for (;;) {
    const size_t dot = dotted_path.find('.', start);
    path_.push_back(dotted_path.substr(start, dot - start));
    LOOM_CHECK(!path_.back().empty(), "--field ", dotted_path, ": an empty key in the dotted path");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
}

JsonFieldReader::~JsonFieldReader() = default;

FieldResult JsonFieldReader::read(std::string_view line) {
  parser_->big.reset();
  if (line.size() > kKeptCapacity) parser_->big = std::make_unique<simdjson::dom::parser>();
  auto& parser = parser_->big ? *parser_->big : parser_->dom;
  simdjson::dom::element element;
  if (const auto error = parser.parse(line.data(), line.size(), false).get(element)) {
    // Categorized by our own UTF-8 check: simdjson's error codes may differ between CPUs.
    if (!valid_utf8(line)) return {FieldStatus::kInvalidUtf8, {}, "invalid UTF-8"};
    return {FieldStatus::kMalformed, {}, std::string("malformed JSON (") + simdjson::error_message(error) + ")"};
  }
  std::string at;  // the path walked so far
  for (const auto& key : path_) {
    simdjson::dom::object object;
    if (element.get(object)) {
      return {FieldStatus::kMissing, {},
              (at.empty() ? std::string("the record") : "'" + at + "'") + " is " + type_name(element.type()) +
                  ", not an object with the field '" + dotted_ + "'"};
    }
    at += (at.empty() ? "" : ".") + key;
    if (object.at_key(key).get(element))
      return {FieldStatus::kMissing, {}, "no field '" + at + "' (keys there: " + key_list(object) + ")"};
  }
  std::string_view text;
  if (element.get(text))
    return {FieldStatus::kNotString, {}, "the field '" + dotted_ + "' is " + type_name(element.type()) + ", not a string"};
  return {FieldStatus::kOk, text, {}};
}

bool valid_utf8(std::string_view text) { return simdjson::validate_utf8(text.data(), text.size()); }

}  // namespace loom
