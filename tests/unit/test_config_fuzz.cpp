// Config fuzzing: random mutations of every shipped config (values of the wrong type, negative, huge or
// empty; missing, duplicated, unknown and misspelled keys; broken indentation, truncation and stray
// characters) either parse into a config that round-trips through its YAML dump, or throw ConfigError
// naming the file (with the line, or "(default)" for a key left out) and the key. Anything else (another exception, a crash, a hang) fails.
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "core/config.h"
#include "core/error.h"
#include "test_util.h"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

const std::vector<std::string> kOddValues = {
    "-1", "0", "-0.5", "1e308", "-1e308", "1e-320", "9223372036854775807", "99999999999999999999999", "abc", "",
    "~", "null", "true", "[]", "[1, 2, 3]", "{a: 1}", ".nan", ".inf", "-.inf", "0x10", "1_000", "'7'", "\"\"",
    "[0.9]", "[0.9, 0.95, 0.99]", "[a, b]", "2147483648", "-9223372036854775808", "1.5", "\"unterminated",
    "&anchor 3", "*nope", "!!binary AAAA", "|", ">-", "@", "`", "%", "\t3"};

// One random mutation of a config's text.
std::string mutate(const std::vector<std::string>& original, std::mt19937& rng) {
  auto lines = original;
  auto pick = [&rng](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const size_t i = pick(lines.size());
  static const std::regex key_value(R"(^(\s*)([A-Za-z_]+):\s*(\S.*?)?\s*(#.*)?$)");
  std::smatch m;
  switch (pick(9)) {
    case 0:  // odd value for a key
    case 1:
      if (std::regex_match(lines[i], m, key_value) && m[3].matched)
        lines[i] = m[1].str() + m[2].str() + ": " + kOddValues[pick(kOddValues.size())];
      break;
    case 2:  // delete a line
      lines.erase(lines.begin() + static_cast<long>(i));
      break;
    case 3:  // duplicate a line
      lines.insert(lines.begin() + static_cast<long>(i), lines[i]);
      break;
    case 4:  // misspell a key
      if (std::regex_match(lines[i], m, key_value)) {
        auto key = m[2].str();
        key[pick(key.size())] = 'x';
        lines[i] = m[1].str() + key + ": " + m[3].str();
      }
      break;
    case 5:  // unknown key in a section
      lines.insert(lines.begin() + static_cast<long>(i), "  surprise_" + std::to_string(pick(100)) + ": 1");
      break;
    case 6:  // break the indentation
      lines[i] = (lines[i].rfind("  ", 0) == 0 ? lines[i].substr(2) : "   " + lines[i]);
      break;
    case 7: {  // truncate the file somewhere
      const auto text = joined(lines);
      return text.substr(0, pick(text.size() + 1));
    }
    default: {  // a stray character
      const std::string stray = ":[]{}#&*!|>'\"%@`,-?\t";
      auto& line = lines[i];
      line.insert(pick(line.size() + 1), 1, stray[pick(stray.size())]);
    }
  }
  return joined(lines);
}

}  // namespace

TEST_CASE("config fuzz: mutations of every shipped config parse or fail with file, line and key", "[config]") {
  std::mt19937 rng(20261129);
  int accepted = 0, refused = 0;
  const int per_config = 600;
  for (const auto& entry : std::filesystem::directory_iterator(loom::test::source_dir() / "configs")) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const auto lines = lines_of(text.str());
    const std::string name = "fuzz-" + entry.path().filename().string();
    for (int n = 0; n < per_config; ++n) {
      const auto yaml = mutate(lines, rng);
      INFO(name << " mutation " << n << ":\n" << yaml);
      try {
        const auto config = loom::parse_config(yaml, name);
        // What parses must survive its own dump (a run writes it to RUN_DIR/config.yaml and resumes from it).
        const auto again = loom::parse_config(loom::to_yaml(config), "dump.yaml");
        CHECK(loom::to_yaml(again) == loom::to_yaml(config));
        ++accepted;
      } catch (const loom::ConfigError& e) {
        const std::string message = e.what();
        INFO(message);
        // Starts with the file and line, or the file and "(default)" for a key the mutation removed.
        CHECK((message.rfind(name + ":", 0) == 0 || message.rfind(name + " (default): ", 0) == 0));
        ++refused;
      }
    }
  }
  WARN(accepted << " mutations accepted, " << refused << " refused with a message");
  CHECK(accepted > 100);
  CHECK(refused > 1000);
}
