// What `loom serve` and `loom generate --input` share about the model they run through the engine
// (serve/engine.h, serve/served_model.h): a GPT-family run continues prompts; an encoder-decoder run
// (model.arch transformer, T5) translates them, each prompt a source sentence, decoded from the decoder's start
// token (kBosId) until its end (kEosId) or the decode.* length limit loom translate uses (max_len_a * source
// tokens + max_len_b, within the context). What the engine does for decoder-only models alone is refused for an
// encoder-decoder run with a ConfigError naming the flag: --draft / --speculate (speculative decoding),
// --prefix-caching, --set parallel.tp, --sequential (and loom serve's chat completions answer 404, saying why).
#pragma once
#include <memory>
#include <string>

#include "cli/args.h"
#include "serve/served_model.h"
#include "train/inference.h"

namespace loom::cli {

// The loaded run as the engine's model; throws ConfigError for a model.arch the engine cannot serve or a flag
// above an encoder-decoder run does not take. command: "loom serve" / "loom generate" for the messages.
std::shared_ptr<ServedModel> served_model(const LoadedModel& loaded, const Args& args, int64_t tp,
                                          const std::string& command);

// `--dry-run`'s lines: the KV cache's bytes per token and what the budget holds (and for an encoder-decoder the
// encoded sources' bytes per source token, kept outside the pool).
std::string kv_budget_lines(const ServedModel& model, int64_t block_size, int64_t kv_bytes, int64_t tp,
                            int64_t* blocks, int64_t* per_sequence);

}  // namespace loom::cli
