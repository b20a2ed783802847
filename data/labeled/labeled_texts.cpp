#include "data/labeled/labeled_texts.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {
namespace {

std::string label_text(const nlohmann::json& label) {
  if (label.is_string()) return label.get<std::string>();
  if (label.is_number_integer()) return std::to_string(label.get<int64_t>());
  return {};
}

bool all_integers(const std::vector<std::string>& labels) {
  return std::all_of(labels.begin(), labels.end(), [](const std::string& l) {
    return !l.empty() && l.find_first_not_of("-0123456789") == std::string::npos && l.size() < 19;
  });
}

}  // namespace

std::vector<LabeledText> read_labeled_texts(const std::filesystem::path& path, const Tokenizer& tokenizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path.string() + ": cannot open the labelled texts (JSON Lines of {\"text\", \"label\"})");
  std::vector<LabeledText> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(number);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(where + ": not a JSON object: " + e.what());
    }
    if (!record.is_object()) throw ConfigError(where + ": not a JSON object of {\"text\", \"label\"}");
    LabeledText t;
    t.line = number;
    for (const char* field : {"text", "text_pair"}) {
      if (!record.contains(field)) {
        if (field == std::string("text")) throw ConfigError(where + ": no \"text\" field (the text to classify)");
        continue;
      }
      if (!record[field].is_string()) throw ConfigError(where + ": \"" + field + "\" must be a string");
      auto& ids = field == std::string("text") ? t.text : t.text_pair;
      tokenizer.encode_to(record[field].get<std::string>(), ids);
    }
    if (!record.contains("label")) throw ConfigError(where + ": no \"label\" field (a string or an integer)");
    t.label = label_text(record["label"]);
    if (t.label.empty())
      throw ConfigError(where + ": \"label\" must be a non-empty string or an integer, not " + record["label"].dump());
    out.push_back(std::move(t));
  }
  if (out.empty()) throw ConfigError(path.string() + ": no labelled texts (JSON Lines of {\"text\", \"label\"})");
  return out;
}

std::vector<std::string> label_set(const std::vector<LabeledText>& texts) {
  std::vector<std::string> labels;
  for (const auto& t : texts) labels.push_back(t.label);
  std::sort(labels.begin(), labels.end());
  labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
  if (all_integers(labels))
    std::sort(labels.begin(), labels.end(),
              [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  return labels;
}

std::vector<int64_t> label_ids(const std::vector<LabeledText>& texts, const std::vector<std::string>& labels,
                               const std::filesystem::path& path) {
  std::map<std::string, int64_t> index;
  std::string names;
  for (size_t i = 0; i < labels.size(); ++i) {
    index[labels[i]] = static_cast<int64_t>(i);
    names += (i ? ", " : "") + labels[i];
  }
  std::vector<int64_t> out;
  for (const auto& t : texts) {
    const auto found = index.find(t.label);
    if (found == index.end())
      throw ConfigError(path.string() + ":" + std::to_string(t.line) + ": label '" + t.label +
                        "' is not one of the training file's labels (" + names + ")");
    out.push_back(found->second);
  }
  return out;
}

}  // namespace loom
