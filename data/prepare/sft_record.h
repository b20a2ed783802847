// Supervised fine-tuning records for `loom prepare --sft`: one JSON Lines record -> the pieces of text of
// one training document, each marked as counted by the loss (a response) or context only (a prompt).
// A record is either
//   {"prompt": "...", "response": "..."}       (field names: --prompt-field, --response-field), or
//   {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}, ...]}
// rendered by a chat template (--chat-template FILE). The template is a small YAML file, no Jinja:
//   roles:                                  # every role a record may use, with the text around its content
//     system:    {prefix: "<|system|>\n", suffix: "<|end|>\n"}
//     user:      {prefix: "<|user|>\n", suffix: "<|end|>\n"}
//     assistant: {prefix: "<|assistant|>\n", suffix: "<|end|>\n"}
//   trained_roles: [assistant]              # whose content + suffix the loss counts (default: assistant)
// A message renders as prefix + content + suffix; the prefix is never counted (the model is not asked to
// predict whose turn it is), a trained role's content and suffix are (the suffix ends its turn). With a
// template, a prompt/response record renders as a user then an assistant message. Without one, it is the
// prompt followed directly by the response. Template text may name special tokens ("<|end|>" becomes its
// id); record text never does (data/prepare/document_encoder.h says why).
// Not thread-safe: one reader per thread (each holds its own JSON parser).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "data/prepare/json_field.h"

namespace loom {

struct ChatTemplate {
  struct Role {
    std::string prefix, suffix;
  };
  std::map<std::string, Role> roles;
  std::set<std::string> trained_roles;
};

// Reads and checks a template file; throws ConfigError naming the file and the key that is wrong.
ChatTemplate read_chat_template(const std::string& path);

struct SftOptions {
  bool enabled = false;  // --sft
  std::string prompt_field = "prompt", response_field = "response", messages_field = "messages";
  std::optional<ChatTemplate> chat_template;
};

// A piece of a rendered record: record text (plain) or template text (may name special tokens).
struct SftPiece {
  std::string text;
  bool counted = false;   // the loss counts its tokens
  bool template_text = false;
};

struct SftRecord {
  FieldStatus status = FieldStatus::kOk;
  std::string detail;  // what is wrong, for the message
  std::vector<SftPiece> pieces;
  size_t counted_bytes = 0;  // text the loss counts: a record with none is empty
};

class SftRecordReader {
 public:
  explicit SftRecordReader(const SftOptions& options);
  ~SftRecordReader();
  SftRecordReader(const SftRecordReader&) = delete;
  SftRecordReader& operator=(const SftRecordReader&) = delete;

  // `line` must be followed by at least JsonFieldReader::kJsonPadding readable bytes.
  SftRecord read(std::string_view line);

 private:
  struct Parser;
  std::unique_ptr<Parser> parser_;
  const SftOptions& options_;
};

}  // namespace loom
