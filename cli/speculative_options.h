// The speculative decoding options `loom serve` and `loom generate --input` share (serve/speculative.h):
//   --draft RUN_DIR        a smaller model trained with the target's tokenizer proposes (its own paged KV cache,
//                          sized by the same --kv-mb budget); refused, naming both runs, when its tokenizer or
//                          vocabulary differs from the target's; under --set parallel.tp=N whole on rank 0,
//                          which broadcasts its proposals;
//   --speculate ngram      prompt lookup instead: no second model; --ngram-max N / --ngram-min N (3 / 1);
//   --speculate-k K        proposals a sequence a step (4);
//   --speculate-adaptive   each sequence's k follows its acceptance, within [1, K] (EngineOptions::adaptive_k).
#pragma once
#include <set>
#include <string>

#include "cli/args.h"
#include "serve/engine.h"
#include "train/inference.h"

namespace loom::cli {

extern const std::set<std::string> kSpeculativeOptions;  // the value options above, for parse_args
extern const char* const kSpeculativeUsage;
// value_options with kSpeculativeOptions added; flag_options with --speculate-adaptive.
std::set<std::string> with_speculative_options(std::set<std::string> value_options);
std::set<std::string> with_speculative_flags(std::set<std::string> flag_options);

// Sets options.drafter and options.speculate_k from the arguments (nothing without --draft / --speculate); a
// line that says what drafts ("" without speculation). target_dir: the target's run directory (for messages).
// Over a tensor-parallel target a draft model runs on the TP group's rank 0 only (serve/draft_broadcast.h).
std::string configure_speculation(const Args& args, const LoadedModel& target, const std::string& target_dir,
                                  EngineOptions& options);

}  // namespace loom::cli
