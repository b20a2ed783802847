// The tokenizer options the text commands share (encode, decode, tokenize, prepare): --tokenizer FILE,
// --type, --pattern and --special-tokens, validated as the tokenizer.* config keys are.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/args.h"
#include "data/tokenizers/tokenizer.h"

namespace loom::cli {

// The option names, for parse_args.
const std::set<std::string>& tokenizer_options();
extern const char* const kTokenizerUsage;

// The tokenizer.* settings the options give (model: --tokenizer's FILE, empty without one), validated:
// a ConfigError for a bad setting.
TokenizerConfig tokenizer_config_from_args(const Args& args);

// The tokenizer the options name; a ConfigError when --tokenizer is missing or a setting is bad.
std::unique_ptr<Tokenizer> tokenizer_from_args(const Args& args, const std::string& usage);

// A run without a tokenizer.model (the synthetic tasks) reads and writes text as token ids: "12 7 5" -> {12, 7, 5};
// anything else is a ConfigError naming `where` (e.g. "stdin line 3") and the word.
std::vector<int64_t> parse_token_ids(const std::string& text, const std::string& where, int64_t vocab);

}  // namespace loom::cli
