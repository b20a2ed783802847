// `loom eval CONFIG_OR_RUN_DIR [--set ...] [--split valid|test] [--step S] [--beam N] [--json]`: the mean
// loss and perplexity of a model on its evaluation data, computed as the Trainer's validation
// (train/evaluate.h: train.eval_batches batches of train.batch_size sequences). For a translation model
// (model.arch: transformer) also the quality of its translations of the whole evaluation set, decoded as
// decode.* says (--beam overrides decode.beam): exact match.
//   - a run dir: its newest (or --step) checkpoint, data from the checkpoint's config; --set may change the
//     data and train.* keys but not model.* (the weights fix the model);
//   - a config file: the model its model.* keys describe, with weights from model.init_from (else the
//     random init of run.seed, with a warning).
// loom's config has one evaluation file, data.valid; --split test labels a test file given as
// `--set data.valid=TEST_FILE`, which it then requires (the synthetic translation tasks have one
// evaluation set, --split valid). Runs in one process on runtime.device.
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/evaluate.h"
#include "train/inference.h"
#include "train/runtime.h"
#include "train/translation_eval.h"
#include "train/translation_task.h"

namespace loom::cli {
namespace {

bool sets_key(const std::vector<std::string>& sets, const std::string& prefix) {
  for (const auto& s : sets)
    if (s.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

int eval_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {"split", "step", "beam"}, {"json"}, 1,
                               "loom eval CONFIG_OR_RUN_DIR [--set key.path=value ...] [--split valid|test] [--step S] "
                               "[--beam N] [--json]");
  const std::string split = args.option_or("split", "valid");
  if (split != "valid" && split != "test") throw ConfigError("--split: '" + split + "' is not valid or test");
  const std::filesystem::path target = args.positional[0];

  Config config;
  std::optional<LoadedModel> loaded;
  std::string weights;
  if (std::filesystem::is_directory(target)) {
    if (sets_key(args.sets, "model."))
      throw ConfigError("--set model.*: a run dir's checkpoint fixes the model; evaluate a config file to change it");
    std::optional<int64_t> step;
    if (args.option("step")) step = args.int_option("step", 0);
    loaded = load_trained_model(target, step);
    config = parse_config(to_yaml(loaded->config), (target / "config.yaml").string(), args.sets);
    weights = "checkpoint step " + std::to_string(loaded->step);
  } else {
    if (args.option("step")) throw ConfigError("--step applies to a run dir, not a config file");
    config = load_config(target.string(), args.sets);
    configure_threads(config.runtime);
  }
  if (args.option("beam")) config.decode.beam = args.int_option("beam", 1);
  if (config.decode.beam < 1) throw ConfigError("--beam must be >= 1 (1: greedy)");
  if (split == "test") {
    if (config.model.encoder_decoder())
      throw ConfigError("--split test: this run's pair source has one evaluation set; use --split valid");
    if (!sets_key(args.sets, "data.valid="))
      throw ConfigError("--split test: loom's config holds one evaluation file; pass the test token file as --set data.valid=FILE");
  }
  LOOM_CHECK(config.train.eval_batches > 0, "train.eval_batches is 0: nothing to evaluate");

  const torch::Device device = runtime_device(config.runtime);
  auto task = make_task(config, device, TaskData::kEvaluation, loaded ? &*loaded : nullptr);
  if (!loaded) {
    if (config.model.init_from.empty()) {
      spdlog::warn("no model.init_from: evaluating the random init of run.seed={}", config.run.seed);
      weights = "random init";
    } else {
      task->load_weights(config.model.init_from);
      weights = config.model.init_from;
    }
  }
  // One process evaluates every slice: the same sequences as any training layout.
  config.parallel.dp = config.parallel.tp = config.parallel.pp = 1;
  const Mesh mesh(config, 1, 0);
  const EvalLoss result = evaluate_loss(*task, config, mesh, device);
  const std::string data_name = config.model.encoder_decoder()
                                    ? (config.data.synthetic.empty() ? "pairs" : "synthetic " + config.data.synthetic + " pairs")
                                    : config.data.valid;
  nlohmann::json out = {{"loss", result.loss}, {"ppl", std::exp(result.loss)}, {"split", split}, {"tokens", result.tokens}};
  std::string quality;
  if (auto* translation = dynamic_cast<TranslationTask*>(task.get())) {
    const auto scores = evaluate_translation(translation->encoder_decoder(), translation->data(), config.decode);
    out["exact_match"] = scores.exact_match;
    out["sentences"] = scores.references.size();
    out["beam"] = config.decode.beam;
    quality = " | exact match " + std::to_string(scores.exact_match) + " of " + std::to_string(scores.references.size()) +
              " sentences (beam " + std::to_string(config.decode.beam) + ")";
  }
  if (args.flag("json")) {
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << split << " loss " << result.loss << " | ppl " << std::exp(result.loss) << quality << " | "
              << result.tokens << " tokens of " << data_name << " | " << weights << std::endl;
  }
  return 0;
}

}  // namespace loom::cli
