// One string field of a JSON Lines record, by a dotted path ("text", "meta.body"), through simdjson's
// DOM parser: each line is parsed whole, so a line malformed anywhere is refused, not only before the
// field. Not thread-safe: one reader per thread (each holds its own parser).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

enum class FieldStatus { kOk, kMalformed, kInvalidUtf8, kMissing, kNotString };

struct FieldResult {
  FieldStatus status = FieldStatus::kOk;
  std::string_view text;  // kOk: the string, unescaped; valid until the next read()
  std::string detail;     // otherwise: what is wrong, for the message
};

class JsonFieldReader {
 public:
  explicit JsonFieldReader(const std::string& dotted_path);
  ~JsonFieldReader();
  JsonFieldReader(const JsonFieldReader&) = delete;
  JsonFieldReader& operator=(const JsonFieldReader&) = delete;

  // `line` must be followed by at least kJsonPadding readable bytes (they are not parsed).
  FieldResult read(std::string_view line);

  static const size_t kJsonPadding;

 private:
  struct Parser;
  std::unique_ptr<Parser> parser_;
  std::vector<std::string> path_;
  std::string dotted_;
};

// Whether bytes are valid UTF-8 (simdjson's validator).
bool valid_utf8(std::string_view text);

}  // namespace loom
