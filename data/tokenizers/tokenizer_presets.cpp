#include "data/tokenizers/tokenizer_presets.h"

namespace loom {
namespace {

struct NamedPattern {
  const char* name;
  const char* regex;
};

// Copied character for character from tiktoken_ext/openai_public.py (tiktoken 0.14) and Meta's
// llama3 tokenizer.py: a different but "equivalent" spelling is not guaranteed to split alike.
const NamedPattern kPatterns[] = {
    {"gpt2", R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)"},
    {"cl100k_base",
     R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)"},
    {"o200k_base",
     R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
     R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
     R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"llama3",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

}  // namespace

std::optional<std::string> named_pattern(std::string_view name) {
  for (const auto& p : kPatterns)
    if (name == p.name) return std::string(p.regex);
  if (name == "r50k_base") return named_pattern("gpt2");
  return std::nullopt;
}

std::string pattern_names() {
  std::string out;
  for (const auto& p : kPatterns) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

std::optional<SpecialTokenPreset> special_token_preset(std::string_view name, int64_t base_tokens) {
  SpecialTokenPreset preset;
  if (name == "gpt2" || name == "r50k_base") {
    preset.tokens = {{"<|endoftext|>", 50256}};
  } else if (name == "cl100k_base") {
    preset.tokens = {{"<|endoftext|>", 100257},
                     {"<|fim_prefix|>", 100258},
                     {"<|fim_middle|>", 100259},
                     {"<|fim_suffix|>", 100260},
                     {"<|endofprompt|>", 100276}};
  } else if (name == "o200k_base") {
    preset.tokens = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
  } else if (name == "llama3") {
    // Meta's order: ten named slots (five of them reserved), then reserved 5 .. 250; ids follow the ranks.
    const std::vector<std::string> first = {"<|begin_of_text|>",
                                            "<|end_of_text|>",
                                            "<|reserved_special_token_0|>",
                                            "<|reserved_special_token_1|>",
                                            "<|reserved_special_token_2|>",
                                            "<|reserved_special_token_3|>",
                                            "<|start_header_id|>",
                                            "<|end_header_id|>",
                                            "<|reserved_special_token_4|>",
                                            "<|eot_id|>"};
    std::vector<std::string> texts = first;
    for (int i = 5; i < 256 - 5; ++i) texts.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
    for (size_t i = 0; i < texts.size(); ++i) preset.tokens.push_back({texts[i], static_cast<int32_t>(base_tokens + i)});
    preset.bos = static_cast<int32_t>(base_tokens);
    preset.eos = static_cast<int32_t>(base_tokens + 1);
  } else {
    return std::nullopt;
  }
  if (!preset.eos) preset.eos = preset.tokens[0].id;  // <|endoftext|>
  return preset;
}

}  // namespace loom
