#include "data/prepare/sft_record.h"

#include <simdjson.h>
#include <yaml-cpp/yaml.h>

#include "core/error.h"

namespace loom {
namespace {

// A string field of an object, or why not.
std::optional<std::string> string_field(const simdjson::dom::object& object, const std::string& key,
                                        SftRecord& record, const std::string& where) {
  simdjson::dom::element element;
  if (object.at_key(key).get(element)) {
    record.status = FieldStatus::kMissing;
    record.detail = where + "no field '" + key + "'";
    return std::nullopt;
  }
  std::string_view text;
  if (element.get(text)) {
    record.status = FieldStatus::kNotString;
    record.detail = where + "the field '" + key + "' is not a string";
    return std::nullopt;
  }
  if (!valid_utf8(text)) {
    record.status = FieldStatus::kInvalidUtf8;
    record.detail = where + "the field '" + key + "' is not valid UTF-8";
    return std::nullopt;
  }
  return std::string(text);
}

void add(SftRecord& record, std::string text, bool counted, bool template_text) {
  if (text.empty()) return;
  if (counted) record.counted_bytes += text.size();
  record.pieces.push_back({std::move(text), counted, template_text});
}

// A message in the template's form; false (with the record's status set) for a role it does not know.
bool render(SftRecord& record, const ChatTemplate& chat, const std::string& role, std::string content) {
  const auto found = chat.roles.find(role);
  if (found == chat.roles.end()) {
    std::string roles;
    for (const auto& [name, _] : chat.roles) roles += (roles.empty() ? "" : ", ") + name;
    record.status = FieldStatus::kMissing;
    record.detail = "the role '" + role + "' is not in the chat template (its roles: " + roles + ")";
    return false;
  }
  const bool trained = chat.trained_roles.count(role) > 0;
  add(record, found->second.prefix, false, true);
  add(record, std::move(content), trained, false);
  add(record, found->second.suffix, trained, true);
  return true;
}

}  // namespace

ChatTemplate read_chat_template(const std::string& path) {
  auto fail = [&](const std::string& why) -> ConfigError {
    return ConfigError("--chat-template " + path + ": " + why +
                       " (the format: roles: {ROLE: {prefix: TEXT, suffix: TEXT}, ...}, trained_roles: [ROLE, ...])");
  };
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw fail("cannot read the file");
  } catch (const YAML::Exception& e) {
    throw fail("not YAML: " + std::string(e.what()));
  }
  if (!root.IsMap()) throw fail("not a YAML map");
  ChatTemplate chat;
  try {
    for (const auto& key : root) {
      const auto name = key.first.as<std::string>();
      if (name != "roles" && name != "trained_roles") throw fail("unknown key '" + name + "'");
    }
    if (!root["roles"] || !root["roles"].IsMap() || root["roles"].size() == 0) throw fail("no roles");
    for (const auto& entry : root["roles"]) {
      const auto role = entry.first.as<std::string>();
      if (!entry.second.IsMap()) throw fail("roles." + role + " is not a map of prefix and suffix");
      ChatTemplate::Role r;
      for (const auto& part : entry.second) {
        const auto key = part.first.as<std::string>();
        if (key == "prefix") r.prefix = part.second.as<std::string>();
        else if (key == "suffix") r.suffix = part.second.as<std::string>();
        else throw fail("roles." + role + ": unknown key '" + key + "' (prefix, suffix)");
      }
      chat.roles[role] = r;
    }
    if (root["trained_roles"]) {
      if (!root["trained_roles"].IsSequence()) throw fail("trained_roles is not a list of roles");
      for (const auto& role : root["trained_roles"]) chat.trained_roles.insert(role.as<std::string>());
    } else {
      chat.trained_roles.insert("assistant");
    }
  } catch (const YAML::Exception& e) {
    throw fail(e.what());
  }
  if (chat.trained_roles.empty()) throw fail("trained_roles is empty: the loss would count nothing");
  for (const auto& role : chat.trained_roles)
    if (!chat.roles.count(role)) throw fail("trained role '" + role + "' is not one of the roles");
  return chat;
}

struct SftRecordReader::Parser {
  simdjson::dom::parser dom;
};

SftRecordReader::SftRecordReader(const SftOptions& options) : parser_(std::make_unique<Parser>()), options_(options) {}
SftRecordReader::~SftRecordReader() = default;

SftRecord SftRecordReader::read(std::string_view line) {
  SftRecord record;
  simdjson::dom::element element;
  if (const auto error = parser_->dom.parse(line.data(), line.size(), false).get(element)) {
    record.status = valid_utf8(line) ? FieldStatus::kMalformed : FieldStatus::kInvalidUtf8;
    record.detail = valid_utf8(line) ? std::string("malformed JSON (") + simdjson::error_message(error) + ")"
                                     : std::string("invalid UTF-8");
    return record;
  }
  simdjson::dom::object object;
  if (element.get(object)) {
    record.status = FieldStatus::kMissing;
    record.detail = "the record is not an object";
    return record;
  }
  const auto& chat = options_.chat_template;
  simdjson::dom::element messages;
  if (!object.at_key(options_.messages_field).get(messages)) {
    if (!chat) {
      record.status = FieldStatus::kMissing;
      record.detail = "a '" + options_.messages_field + "' record needs --chat-template FILE to render it";
      return record;
    }
    simdjson::dom::array list;
    if (messages.get(list)) {
      record.status = FieldStatus::kNotString;
      record.detail = "the field '" + options_.messages_field + "' is not a list of {role, content}";
      return record;
    }
    size_t i = 0;
    for (const auto message : list) {
      const std::string where = options_.messages_field + "[" + std::to_string(i++) + "]: ";
      simdjson::dom::object m;
      if (message.get(m)) {
        record.status = FieldStatus::kNotString;
        record.detail = where + "not an object {role, content}";
        return record;
      }
      const auto role = string_field(m, "role", record, where);
      if (!role) return record;
      auto content = string_field(m, "content", record, where);
      if (!content || !render(record, *chat, *role, std::move(*content))) return record;
    }
    return record;
  }
  auto prompt = string_field(object, options_.prompt_field, record, "");
  if (!prompt) return record;
  auto response = string_field(object, options_.response_field, record, "");
  if (!response) return record;
  if (chat) {
    if (!render(record, *chat, "user", std::move(*prompt))) return record;
    render(record, *chat, "assistant", std::move(*response));
    return record;
  }
  add(record, std::move(*prompt), false, false);
  add(record, std::move(*response), true, false);
  return record;
}

}  // namespace loom
