// The requests of `loom generate --input FILE`: JSON Lines, one object a line (blank lines skipped),
//   {"prompt": "...", "max_tokens": N, "temperature": T, "top_k": K, "top_p": P, "seed": S, "stop": "..." or [...]}
// with only "prompt" required; the others default to the command's options. A bad line throws ConfigError naming
// the file, the line and the field.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "serve/engine.h"

namespace loom {

struct PromptRequest {
  int64_t line = 0;        // 1-based line of the file
  std::string prompt;      // the text, not yet tokenized
  GenerationRequest request;  // every field but prompt
};

// defaults: what a line leaves out (its prompt ignored).
std::vector<PromptRequest> read_prompt_file(const std::filesystem::path& path, const GenerationRequest& defaults);

}  // namespace loom
