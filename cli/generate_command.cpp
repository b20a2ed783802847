// `loom generate RUN_DIR --prompt TEXT`: samples a continuation of the prompt from a trained GPT and
// prints it as it is sampled, a token at a time (flushed), ending at the tokenizer's end-of-sequence token
// unless --ignore-eos; --json prints one object at the end instead.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/tokenizers/incremental_decoder.h"
#include "data/tokenizers/tokenizer.h"
#include "models/generate.h"
#include "train/inference.h"

namespace loom::cli {
namespace {

// Far more than any sampling session wants, and few enough that a typo cannot run for days.
constexpr int64_t kMaxNewTokens = int64_t{1} << 20;

}  // namespace

int generate_command(const Argv& argv, const ProcessGroup&) {
  const char* usage =
      "loom generate RUN_DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] "
      "[--seed S] [--step S] [--no-cache] [--ignore-eos] [--json]";
  const auto args = parse_args(argv, {"prompt", "max-new-tokens", "temperature", "top-k", "top-p", "seed", "step"},
                               {"no-cache", "ignore-eos", "json"}, 1, usage);
  SamplingOptions sampling;
  sampling.temperature = args.double_option("temperature", 0.8);
  sampling.top_k = args.int_option("top-k", 0);
  sampling.top_p = args.double_option("top-p", 1.0);
  sampling.seed = static_cast<uint64_t>(args.int_option("seed", 0));
  sampling.use_cache = !args.flag("no-cache");
  const int64_t max_new = args.int_option("max-new-tokens", 64, 0, kMaxNewTokens);
  if (sampling.temperature < 0) throw ConfigError("--temperature must be >= 0 (0: greedy)");
  if (sampling.top_k < 0) throw ConfigError("--top-k must be >= 0 (0: off)");
  if (sampling.top_p <= 0 || sampling.top_p > 1) throw ConfigError("--top-p must be in (0, 1]");

  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);
  const auto loaded = load_trained_model(args.positional[0], step);
  auto model = loaded.as<Gpt>();
  LOOM_CHECK(model, args.positional[0], " is a model.arch=", enum_name(loaded.config.model.arch),
             " run: loom translate decodes it");
  LOOM_CHECK(!loaded.config.tokenizer.model.empty(), "the run has no tokenizer.model to turn the prompt into tokens");
  const auto tokenizer = load_tokenizer(loaded.config.tokenizer);
  const std::string prompt_text = args.option_or("prompt", "");
  const auto ids = tokenizer->encode(prompt_text);
  // An empty prompt starts a fresh line, as after the end of a verse.
  std::vector<int64_t> prompt(ids.begin(), ids.end());
  if (prompt.empty()) prompt.push_back(tokenizer->require_eos());
  const auto eos = tokenizer->eos_id();
  const int64_t stop = args.flag("ignore-eos") || !eos ? -1 : *eos;

  const bool json = args.flag("json");
  const std::vector<int32_t> context(prompt.begin(), prompt.end());
  IncrementalDecoder text(*tokenizer, context);
  std::vector<int32_t> generated;
  if (!json) std::cout << decode_lines(*tokenizer, context) << std::flush;
  generate(model, prompt, max_new, sampling, [&](int64_t id) {
    generated.push_back(static_cast<int32_t>(id));
    if (!json && id != stop) std::cout << text.add(static_cast<int32_t>(id)) << std::flush;
    return true;
  }, stop);
  const bool stopped = !generated.empty() && generated.back() == stop;
  if (stopped) generated.pop_back();
  if (json) {
    std::vector<int32_t> all = context;
    all.insert(all.end(), generated.begin(), generated.end());
    std::cout << nlohmann::json{{"prompt", prompt_text},
                                {"tokens", generated},
                                {"text", decode_lines(*tokenizer, all)},
                                {"stop", stopped ? "eos" : "length"}}
                     .dump()
              << std::endl;
  } else {
    std::cout << text.finish() << std::endl;
  }
  return 0;
}

}  // namespace loom::cli
