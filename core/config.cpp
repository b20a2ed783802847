// YAML -> Config: typed conversion, unknown-key detection, --set overrides, validation and dumping.
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/family_rules.h"
#include "core/parse_number.h"

namespace loom {
namespace {

std::string describe(const YAML::Node& node) {
  if (!node || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  return node.IsSequence() ? "a list" : "a mapping";
}

[[noreturn]] void type_error(const std::string& where, const std::string& key, const std::string& expected,
                             const YAML::Node& node) {
  throw ConfigError(where + ": " + key + ": expected " + expected + ", got " + describe(node));
}

// One overload per field type; `where` and `key` only serve the error message.
void assign(const YAML::Node& node, int64_t& out, const std::string& where, const std::string& key) {
  const auto value = node.IsScalar() ? parse_int64(node.Scalar()) : std::nullopt;
  if (!value) type_error(where, key, "an integer", node);
  out = *value;
}

void assign(const YAML::Node& node, double& out, const std::string& where, const std::string& key) {
  const auto value = node.IsScalar() ? parse_double(node.Scalar()) : std::nullopt;
  if (!value) type_error(where, key, "a finite number", node);
  out = *value;
}

void assign(const YAML::Node& node, bool& out, const std::string& where, const std::string& key) {
  if (!node.IsScalar()) type_error(where, key, "true or false", node);
  const std::string& s = node.Scalar();
  if (s == "true" || s == "True" || s == "yes") {
    out = true;
  } else if (s == "false" || s == "False" || s == "no") {
    out = false;
  } else {
    type_error(where, key, "true or false", node);
  }
}

void assign(const YAML::Node& node, std::string& out, const std::string& where, const std::string& key) {
  if (node.IsNull()) {  // `key:` or `--set key=` clears a string (an empty data.valid turns evaluation off)
    out.clear();
    return;
  }
  if (!node.IsScalar()) type_error(where, key, "a string", node);
  out = node.Scalar();
}

// An enum-like value (core/config_enums.h): one of its table's names; `key:` alone is the empty name.
template <class E, std::enable_if_t<is_config_enum_v<E>, int> = 0>
void assign(const YAML::Node& node, E& out, const std::string& where, const std::string& key) {
  if (!node.IsNull() && !node.IsScalar()) type_error(where, key, "one of " + enum_choices<E>(), node);
  const std::string name = node.IsNull() ? "" : node.Scalar();
  const auto value = parse_enum<E>(name);
  if (!value) throw ConfigError(where + ": " + key + ": '" + name + "' is not one of " + enum_choices<E>());
  out = *value;
}

// A list of numbers (optim.betas, parallel.pp_layers); each item is checked like a single value.
template <class T>
void assign(const YAML::Node& node, std::vector<T>& out, const std::string& where, const std::string& key) {
  if (!node.IsSequence()) type_error(where, key, "a list of numbers", node);
  std::vector<T> values;
  for (const auto& item : node) {
    T v{};
    assign(item, v, where, key + "[" + std::to_string(values.size()) + "]");
    values.push_back(v);
  }
  out = values;
}

// Where an item inside a key's value is: its own line of the same file ("configs/x.yaml:14"), or the
// key's `where` when that is a --set (whose YAML has lines of its own) or the item has no position.
std::string where_item(const std::string& where, const YAML::Node& item) {
  const auto colon = where.rfind(':');
  if (where.rfind("--set", 0) == 0 || colon == std::string::npos || item.Mark().is_null()) return where;
  return where.substr(0, colon + 1) + std::to_string(item.Mark().line + 1);
}

// One data source of a list: a path (weight 1) or a {path, weight} mapping.
DataSource data_source(const YAML::Node& item, const std::string& where, const std::string& key) {
  DataSource source;
  if (item.IsScalar()) {
    assign(item, source.path, where, key);
    return source;
  }
  if (!item.IsMap()) type_error(where, key, "a path or a {path, weight} mapping", item);
  bool has_path = false;
  for (const auto& entry : item) {
    const std::string name = entry.first.Scalar();
    const std::string entry_where = where_item(where, entry.first);
    if (name == "path") {
      assign(entry.second, source.path, entry_where, key + ".path");
      has_path = true;
    } else if (name == "weight") {
      assign(entry.second, source.weight, entry_where, key + ".weight");
    } else {
      throw ConfigError(entry_where + ": " + key + "." + name + ": unknown key (a data source has path and weight)");
    }
  }
  if (!has_path) throw ConfigError(where + ": " + key + ": a data source needs a path");
  return source;
}

// data.train: one path (weight 1), nothing (none), or a list of sources mixed by weight.
void assign(const YAML::Node& node, std::vector<DataSource>& out, const std::string& where, const std::string& key) {
  std::vector<DataSource> sources;
  if (node.IsScalar()) {
    if (!node.Scalar().empty()) sources.push_back({node.Scalar(), 1.0});
  } else if (node.IsSequence()) {
    for (const auto& item : node)
      sources.push_back(data_source(item, where_item(where, item), key + "[" + std::to_string(sources.size()) + "]"));
  } else if (!node.IsNull()) {
    type_error(where, key, "a path or a list of {path, weight} sources", node);
  }
  out = sources;
}

// tokenizer.special_tokens: a preset name, or a mapping of token text to id.
void assign(const YAML::Node& node, SpecialTokensSetting& out, const std::string& where, const std::string& key) {
  SpecialTokensSetting value;
  if (node.IsScalar()) {
    value.preset = node.Scalar();
  } else if (node.IsMap()) {
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) type_error(where, key, "token text as keys", entry.first);
      const std::string text = entry.first.Scalar();
      assign(entry.second, value.ids[text], where, key + "[" + text + "]");
    }
  } else if (!node.IsNull()) {
    type_error(where, key, "a preset name or a mapping of token text to id", node);
  }
  out = value;
}

YAML::Node to_node(int64_t v) { return YAML::Node(v); }
// The shortest text that reads back as exactly v (0.1, not 0.10000000000000001).
YAML::Node to_node(double v) {
  char text[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return YAML::Node(std::string(text));
}
YAML::Node to_node(bool v) { return YAML::Node(v); }
YAML::Node to_node(const std::string& v) { return YAML::Node(v); }
YAML::Node to_node(const SpecialTokensSetting& v) {
  if (v.ids.empty()) return YAML::Node(v.preset);
  YAML::Node map(YAML::NodeType::Map);
  for (const auto& [text, id] : v.ids) map[text] = id;
  map.SetStyle(YAML::EmitterStyle::Flow);
  return map;
}
template <class E, std::enable_if_t<is_config_enum_v<E>, int> = 0>
YAML::Node to_node(E v) {
  return YAML::Node(std::string(enum_name(v)));
}
template <class T>
YAML::Node to_node(const std::vector<T>& v) {
  YAML::Node seq(YAML::NodeType::Sequence);
  for (const T& x : v) seq.push_back(to_node(x));
  seq.SetStyle(YAML::EmitterStyle::Flow);
  return seq;
}

// A single unweighted source stays a plain path, so config.yaml reads as it always did.
YAML::Node to_node(const std::vector<DataSource>& sources) {
  if (sources.empty()) return YAML::Node(std::string());
  if (sources.size() == 1 && sources[0].weight == 1.0) return YAML::Node(sources[0].path);
  YAML::Node seq(YAML::NodeType::Sequence);
  for (const auto& s : sources) {
    YAML::Node item(YAML::NodeType::Map);
    item["path"] = s.path;
    item["weight"] = to_node(s.weight);
    seq.push_back(item);
  }
  seq.SetStyle(YAML::EmitterStyle::Flow);
  return seq;
}

using Setter = std::function<void(const YAML::Node&, const std::string& where)>;

std::map<std::string, Setter> setters(Config& config) {
  std::map<std::string, Setter> out;
  visit_fields(config, [&](const char* key, auto& member, const char*) {
    out[key] = [&member, key](const YAML::Node& node, const std::string& where) { assign(node, member, where, key); };
  });
  return out;
}

std::string line_of(const std::string& name, const YAML::Node& node) {
  return name + ":" + std::to_string(node.Mark().line + 1);
}

// Keys the user may have meant, for "unknown key" messages.
std::string suggestion(const std::map<std::string, Setter>& known, const std::string& key) {
  const std::string section = key.substr(0, key.find('.') + 1);
  std::string keys;
  for (const auto& [k, _] : known)
    if (k.rfind(section, 0) == 0) keys += (keys.empty() ? "" : ", ") + k;
  return keys.empty() ? "" : " (known keys: " + keys + ")";
}

// The keys of a mapping under `prefix`; a mapping under a key that prefixes known keys (model.moe) is a
// nested section, read the same way.
void apply_entries(Config& config, const std::map<std::string, Setter>& known, const std::string& prefix,
                   const YAML::Node& node, const std::string& name) {
  for (const auto& entry : node) {
    const std::string key = prefix + "." + entry.first.as<std::string>();
    const std::string where = line_of(name, entry.first);
    auto it = known.find(key);
    if (it == known.end()) {
      bool is_section = false;
      for (const auto& [k, _] : known) is_section |= k.rfind(key + ".", 0) == 0;
      if (is_section && entry.second.IsMap()) {
        apply_entries(config, known, key, entry.second, name);
        continue;
      }
      throw ConfigError(where + ": " + key +
                        (is_section ? ": expected a mapping of keys, got " + describe(entry.second)
                                    : ": unknown key" + suggestion(known, key)));
    }
    it->second(entry.second, where);
    config.origin[key] = where;
  }
}

void apply_yaml(Config& config, const YAML::Node& root, const std::string& name) {
  if (!root || root.IsNull()) return;
  if (!root.IsMap()) throw ConfigError(line_of(name, root) + ": the config must be a mapping of sections");
  auto known = setters(config);
  for (const auto& section : root) {
    const std::string section_name = section.first.as<std::string>();
    bool is_section = false;
    for (const auto& [k, _] : known) is_section |= k.rfind(section_name + ".", 0) == 0;
    if (!is_section || !section.second.IsMap())
      throw ConfigError(line_of(name, section.first) + ": " + section_name +
                        (is_section ? ": expected a mapping of keys, got " + describe(section.second)
                                    : ": unknown section (sections: run, model, data, tokenizer, optim, schedule, "
                                      "train, decode, precision, parallel, checkpoint, runtime)"));
    apply_entries(config, known, section_name, section.second, name);
  }
}

void apply_override(Config& config, const std::string& assignment) {
  const std::string where = "--set " + assignment;
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw ConfigError(where + ": expected --set key.path=value");
  const std::string key = assignment.substr(0, eq);
  auto known = setters(config);
  auto it = known.find(key);
  if (it == known.end()) throw ConfigError(where + ": " + key + ": unknown key" + suggestion(known, key));
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": " + key + ": cannot parse the value: " + e.msg);
  }
  it->second(value, where);
  config.origin[key] = where;
}

}  // namespace

std::string Config::where(const std::string& key_path) const {
  auto it = origin.find(key_path);
  return it == origin.end() ? source + " (default)" : it->second;
}

std::string PrecisionConfig::label() const {
  return std::string(enum_name(dtype)) + (param_dtype == ParamDtype::kBf16 ? " (bf16 weights, fp32 master)" : "");
}

int64_t ModelConfig::pipeline_layers() const { return model_shape(*this).pipeline_layers(); }

int64_t Config::micro_batch_size(int64_t dp) const {
  if (parallel.microbatches > 0) return train.batch_size / (dp * parallel.microbatches);
  return train.micro_batch_size > 0 ? train.micro_batch_size : train.batch_size / dp;
}

int64_t Config::accumulation_steps(int64_t dp) const { return train.batch_size / (micro_batch_size(dp) * dp); }

int64_t Config::sequence_pad_multiple() const {
  const int64_t pad = std::max<int64_t>(1, data.pad_to_multiple);
  return parallel.sequence_parallel_active() ? std::lcm(pad, parallel.tp) : pad;
}

int64_t Config::schedule_total_steps() const {
  return schedule.total_steps > 0 ? schedule.total_steps : train.max_steps;
}

Config parse_config(const std::string& yaml_text, const std::string& name, const std::vector<std::string>& overrides) {
  Config config;
  config.source = name;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(name + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
  apply_yaml(config, root, name);
  for (const auto& o : overrides) apply_override(config, o);
  validate(config);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the config file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

std::string to_yaml(const Config& config) {
  YAML::Node root(YAML::NodeType::Map);
  visit_fields(const_cast<Config&>(config), [&](const char* key, auto& member, const char*) {
    // One level of mapping per dot: model.moe.top_k is model: {moe: {top_k: ...}}.
    std::string k = key;
    YAML::Node node = root;
    for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.')) {
      node.reset(node[k.substr(0, dot)]);
      k = k.substr(dot + 1);
    }
    node[k] = to_node(member);
  });
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string config_value_text(const Config& config, const std::string& key_path) {
  std::optional<std::string> text;
  visit_fields(const_cast<Config&>(config), [&](const char* key, auto& member, const char*) {
    if (key_path != key) return;
    YAML::Emitter e;
    e << to_node(member);
    text = e.c_str();
  });
  if (!text) throw ConfigError(key_path + ": unknown key");
  return *text;
}

std::string config_reference_markdown() {
  Config defaults;
  std::ostringstream out;
  out << "| key | default | meaning |\n|---|---|---|\n";
  visit_fields(defaults, [&](const char* key, auto& member, const char* doc) {
    YAML::Emitter e;
    e << to_node(member);
    std::string value = e.c_str();
    if (value.empty() || value == "\"\"" || value == "''") value = "(empty)";
    std::string meaning = doc;
    if constexpr (is_config_enum_v<std::decay_t<decltype(member)>>)
      meaning += " One of " + enum_reference<std::decay_t<decltype(member)>>() + ".";
    out << "| `" << key << "` | `" << value << "` | " << meaning << " |\n";
  });
  return out.str();
}

}  // namespace loom
