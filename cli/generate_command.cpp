#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "models/generate.h"
#include "train/inference.h"

namespace loom::cli {

int generate_command(const Argv& argv, const ProcessGroup&) {
  const char* usage =
      "loom generate RUN_DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] "
      "[--seed S] [--step S] [--no-cache]";
  const auto args = parse_args(argv, {"prompt", "max-new-tokens", "temperature", "top-k", "top-p", "seed", "step"},
                               {"no-cache"}, 1, usage);
  SamplingOptions sampling;
  sampling.temperature = args.double_option("temperature", 0.8);
  sampling.top_k = args.int_option("top-k", 0);
  sampling.top_p = args.double_option("top-p", 1.0);
  sampling.seed = static_cast<uint64_t>(args.int_option("seed", 0));
  sampling.use_cache = !args.flag("no-cache");
  const int64_t max_new = args.int_option("max-new-tokens", 64);
  if (sampling.temperature < 0) throw ConfigError("--temperature must be >= 0 (0: greedy)");
  if (sampling.top_k < 0) throw ConfigError("--top-k must be >= 0 (0: off)");
  if (sampling.top_p <= 0 || sampling.top_p > 1) throw ConfigError("--top-p must be in (0, 1]");
  if (max_new < 0) throw ConfigError("--max-new-tokens must be >= 0");

  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);
  auto loaded = load_trained_model(args.positional[0], step);
  LOOM_CHECK(loaded.model, args.positional[0], " is a model.arch=", loaded.config.model.arch,
             " run: loom translate decodes it");
  LOOM_CHECK(!loaded.config.tokenizer.model.empty(), "the run has no tokenizer.model to turn the prompt into tokens");
  const Tokenizer tokenizer(loaded.config.tokenizer.model);
  const std::string prompt_text = args.option_or("prompt", "");
  auto ids = tokenizer.encode(prompt_text);
  // An empty prompt starts a fresh line, as after the end of a verse.
  std::vector<int64_t> prompt(ids.begin(), ids.end());
  if (prompt.empty()) prompt.push_back(tokenizer.eos_id());

  const auto generated = generate(loaded.model, prompt, max_new, sampling);
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), generated.begin(), generated.end());
  std::cout << tokenizer.decode(all) << std::endl;
  return 0;
}

}  // namespace loom::cli
