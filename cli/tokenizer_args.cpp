#include "cli/tokenizer_args.h"

#include "core/error.h"

namespace loom::cli {

const char* const kTokenizerUsage =
    "--tokenizer FILE [--type auto|sentencepiece|huggingface|tiktoken] [--pattern NAME_OR_REGEX] "
    "[--special-tokens PRESET_OR_YAML_MAP]";

const std::set<std::string>& tokenizer_options() {
  static const std::set<std::string> options = {"tokenizer", "type", "pattern", "special-tokens"};
  return options;
}

TokenizerConfig tokenizer_config_from_args(const Args& args) {
  // The pattern is taken as it is (a regex is no YAML); the special tokens parse as the config key does,
  // and validate() checks all as it checks the tokenizer.* keys.
  Config config;
  config.tokenizer.model = args.option_or("tokenizer", "");
  config.tokenizer.type = args.option_or("type", "auto");
  config.tokenizer.pattern = args.option_or("pattern", "");
  if (auto special = args.option("special-tokens")) {
    const Config parsed = parse_config("", "command line", {"tokenizer.special_tokens=" + *special});
    config.tokenizer.special_tokens = parsed.tokenizer.special_tokens;
  }
  validate(config);
  return config.tokenizer;
}

std::unique_ptr<Tokenizer> tokenizer_from_args(const Args& args, const std::string& usage) {
  if (!args.option("tokenizer")) throw ConfigError("--tokenizer FILE is required\nusage: " + usage);
  return load_tokenizer(tokenizer_config_from_args(args));
}

}  // namespace loom::cli
