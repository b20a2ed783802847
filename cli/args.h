// Command-line parsing for the subcommands: positionals, `--name value` options, `--flag`s and
// repeated `--set key.path=value`. Anything unexpected is a usage error (exit code 2).
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace loom::cli {

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  std::map<std::string, std::string> options;
  std::set<std::string> flags;

  std::optional<std::string> option(const std::string& name) const;
  std::string option_or(const std::string& name, const std::string& fallback) const;
  int64_t int_option(const std::string& name, int64_t fallback) const;
  double double_option(const std::string& name, double fallback) const;
  // The same, refused (naming the option, the value and the range) outside [min, max]: options that size
  // a resource (steps, tokens, buffers) are bounded so that a typo cannot exhaust the machine.
  int64_t int_option(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double double_option(const std::string& name, double fallback, double min, double max) const;
  bool flag(const std::string& name) const { return flags.count(name) > 0; }
};

// positional_count: how many positionals a command takes (exactly), or kOneOrMore.
constexpr size_t kOneOrMore = static_cast<size_t>(-1);

// value_options take a value (`--top-k 5`); flag_options do not. `--set` is always accepted.
Args parse_args(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                const std::set<std::string>& flag_options, size_t positional_count, const std::string& usage);

}  // namespace loom::cli
