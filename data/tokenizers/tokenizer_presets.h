// The split patterns and special tokens of the well-known tiktoken encodings, by name, for .tiktoken
// files (which carry neither): gpt2 (= r50k_base), cl100k_base, o200k_base as tiktoken defines them,
// and llama3 as Meta's tokenizer.py does (its 256 special tokens follow the file's ranks).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/tokenizer.h"

namespace loom {

// The regex a pattern name stands for; nullopt when `name` is not one.
std::optional<std::string> named_pattern(std::string_view name);

// "gpt2, cl100k_base, o200k_base, llama3", for messages.
std::string pattern_names();

struct SpecialTokenPreset {
  std::vector<SpecialToken> tokens;
  std::optional<int32_t> bos, eos;
};

// The special tokens of preset `name` for a file of `base_tokens` ranks; nullopt when not a preset.
std::optional<SpecialTokenPreset> special_token_preset(std::string_view name, int64_t base_tokens);

}  // namespace loom
