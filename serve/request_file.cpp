#include "serve/request_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace loom {
namespace {

class PromptLineReader {
 public:
  PromptLineReader(const std::filesystem::path& path, int64_t line) : where_(path.string() + ":" + std::to_string(line)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw ConfigError(where_ + ": \"" + field + "\" " + what);
  }

  int64_t integer(const nlohmann::json& value, const std::string& field, int64_t min) const {
    if (!value.is_number_integer() || value.get<int64_t>() < min)
      fail(field, "must be an integer >= " + std::to_string(min) + ", not " + value.dump());
    return value.get<int64_t>();
  }

  double number(const nlohmann::json& value, const std::string& field) const {
    if (!value.is_number()) fail(field, "must be a number, not " + value.dump());
    return value.get<double>();
  }

  PromptRequest parse(const std::string& text, int64_t line, const GenerationRequest& defaults) const {
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(where_ + ": not JSON (" + e.what() + ")");
    }
    if (!object.is_object()) throw ConfigError(where_ + ": a line must be a JSON object with a \"prompt\"");
    PromptRequest out;
    out.line = line;
    out.request = defaults;
    out.request.prompt.clear();
    if (!object.contains("prompt")) fail("prompt", "is missing");
    for (const auto& [field, value] : object.items()) {
      if (field == "prompt") {
        if (!value.is_string()) fail(field, "must be a string, not " + value.dump());
        out.prompt = value.get<std::string>();
      } else if (field == "max_tokens") {
        out.request.max_tokens = integer(value, field, 0);
      } else if (field == "temperature") {
        out.request.sampling.temperature = number(value, field);
        if (out.request.sampling.temperature < 0) fail(field, "must be >= 0 (0: greedy)");
      } else if (field == "top_k") {
        out.request.sampling.top_k = integer(value, field, 0);
      } else if (field == "top_p") {
        out.request.sampling.top_p = number(value, field);
        if (out.request.sampling.top_p <= 0 || out.request.sampling.top_p > 1) fail(field, "must be in (0, 1]");
      } else if (field == "seed") {
        out.request.sampling.seed = static_cast<uint64_t>(integer(value, field, 0));
      } else if (field == "stop") {
        out.request.stop.clear();
        if (value.is_string()) {
          out.request.stop.push_back(value.get<std::string>());
        } else if (value.is_array()) {
          for (const auto& s : value) {
            if (!s.is_string()) fail(field, "must be a string or a list of strings, not " + value.dump());
            out.request.stop.push_back(s.get<std::string>());
          }
        } else {
          fail(field, "must be a string or a list of strings, not " + value.dump());
        }
      } else {
        fail(field, "is not a field (prompt, max_tokens, temperature, top_k, top_p, seed, stop)");
      }
    }
    return out;
  }

 private:
  std::string where_;
};

}  // namespace

std::vector<PromptRequest> read_prompt_file(const std::filesystem::path& path, const GenerationRequest& defaults) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the prompts file " + path.string());
  std::vector<PromptRequest> out;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(PromptLineReader(path, line).parse(text, line, defaults));
  }
  return out;
}

}  // namespace loom
