#include "cli/args.h"

#include "core/error.h"
#include "core/parse_number.h"

#include <cstdio>

namespace loom::cli {
namespace {

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

std::optional<std::string> Args::option(const std::string& name) const {
  auto it = options.find(name);
  if (it == options.end()) return std::nullopt;
  return it->second;
}

std::string Args::option_or(const std::string& name, const std::string& fallback) const {
  return option(name).value_or(fallback);
}

int64_t Args::int_option(const std::string& name, int64_t fallback) const {
  const auto text = option(name);
  if (!text) return fallback;
  const auto value = parse_int64(*text);
  if (!value) throw ConfigError("--" + name + ": expected an integer, got '" + *text + "'");
  return *value;
}

double Args::double_option(const std::string& name, double fallback) const {
  const auto text = option(name);
  if (!text) return fallback;
  const auto value = parse_double(*text);
  if (!value) throw ConfigError("--" + name + ": expected a number, got '" + *text + "'");
  return *value;
}

int64_t Args::int_option(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  const int64_t value = int_option(name, fallback);
  if (value < min || value > max)
    throw ConfigError("--" + name + " " + std::to_string(value) + " must be in [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
  return value;
}

double Args::double_option(const std::string& name, double fallback, double min, double max) const {
  const double value = double_option(name, fallback);
  if (!(value >= min && value <= max))
    throw ConfigError("--" + name + " " + option_or(name, "") + " must be in [" + format_number(min) + ", " +
                      format_number(max) + "]");
  return value;
}

Args parse_args(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                const std::set<std::string>& flag_options, size_t positional_count, const std::string& usage) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) {
      args.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flag_options.count(name)) {
      args.flags.insert(name);
      continue;
    }
    if (name != "set" && !value_options.count(name)) throw ConfigError("unknown option --" + name + "\nusage: " + usage);
    if (!inline_value) {
      if (i + 1 >= argv.size()) throw ConfigError("--" + name + " needs a value\nusage: " + usage);
      value = argv[++i];
    }
    if (name == "set") {
      args.sets.push_back(value);
    } else {
      args.options[name] = value;
    }
  }
  if (positional_count == kOneOrMore ? args.positional.empty() : args.positional.size() != positional_count)
    throw ConfigError("expected " + (positional_count == kOneOrMore ? "at least 1" : std::to_string(positional_count)) +
                      " argument(s), got " + std::to_string(args.positional.size()) + "\nusage: " + usage);
  return args;
}

}  // namespace loom::cli
