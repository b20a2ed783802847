#include "cli/tokenizer_args.h"

#include <sstream>

#include "core/error.h"
#include "core/parse_number.h"

namespace loom::cli {

const char* const kTokenizerUsage =
    "--tokenizer FILE [--type auto|sentencepiece|huggingface|tiktoken] [--pattern NAME_OR_REGEX] "
    "[--special-tokens PRESET_OR_YAML_MAP]";

const std::set<std::string>& tokenizer_options() {
  static const std::set<std::string> options = {"tokenizer", "type", "pattern", "special-tokens"};
  return options;
}

TokenizerConfig tokenizer_config_from_args(const Args& args) {
  // The pattern is taken as it is (a regex is no YAML); the type and the special tokens parse as their
  // config keys do, and validate() checks all as it checks the tokenizer.* keys.
  std::vector<std::string> sets;
  if (auto type = args.option("type")) sets.push_back("tokenizer.type=" + *type);
  if (auto special = args.option("special-tokens")) sets.push_back("tokenizer.special_tokens=" + *special);
  Config config = parse_config("", "command line", sets);
  config.tokenizer.model = args.option_or("tokenizer", "");
  config.tokenizer.pattern = args.option_or("pattern", "");
  validate(config);
  return config.tokenizer;
}

std::unique_ptr<Tokenizer> tokenizer_from_args(const Args& args, const std::string& usage) {
  if (!args.option("tokenizer")) throw ConfigError("--tokenizer FILE is required\nusage: " + usage);
  return load_tokenizer(tokenizer_config_from_args(args));
}

std::vector<int64_t> parse_token_ids(const std::string& text, const std::string& where, int64_t vocab) {
  std::istringstream words(text);
  std::vector<int64_t> ids;
  for (std::string word; words >> word;) {
    const int64_t id = parse_int64(word).value_or(-1);
    if (id < 0 || id >= vocab)
      throw ConfigError(where + ": '" + word + "' is not a token id in [0, " + std::to_string(vocab) +
                        ") (this run has no tokenizer.model, so its text is token ids)");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace loom::cli
