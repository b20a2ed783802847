// `loom eval CONFIG_OR_RUN_DIR [--set ...] [--split valid|test] [--step S] [--json]`: the mean loss and
// perplexity of a model on a token file, computed as the Trainer's validation (train/evaluate.h:
// train.eval_batches batches of train.batch_size windows of data.seq_len + 1 tokens).
//   - a run dir: its newest (or --step) checkpoint, data from the checkpoint's config; --set may change the
//     data and train.* keys but not model.* (the weights fix the model);
//   - a config file: the model its model.* keys describe, with weights from model.init_from (else the
//     random init of run.seed, with a warning).
// loom's config has one evaluation file, data.valid; --split test labels a test file given as
// `--set data.valid=TEST_FILE`, which it then requires. Runs in one process on runtime.device.
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/hf_weights.h"
#include "train/evaluate.h"
#include "train/inference.h"
#include "train/runtime.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

bool sets_key(const std::vector<std::string>& sets, const std::string& prefix) {
  for (const auto& s : sets)
    if (s.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

int eval_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {"split", "step"}, {"json"}, 1,
                               "loom eval CONFIG_OR_RUN_DIR [--set key.path=value ...] [--split valid|test] [--step S] [--json]");
  const std::string split = args.option_or("split", "valid");
  if (split != "valid" && split != "test") throw ConfigError("--split: '" + split + "' is not valid or test");
  if (split == "test" && !sets_key(args.sets, "data.valid="))
    throw ConfigError("--split test: loom's config holds one evaluation file; pass the test token file as --set data.valid=FILE");
  const std::filesystem::path target = args.positional[0];

  Config config;
  Gpt model{nullptr};
  std::string weights;
  if (std::filesystem::is_directory(target)) {
    if (sets_key(args.sets, "model."))
      throw ConfigError("--set model.*: a run dir's checkpoint fixes the model; evaluate a config file to change it");
    std::optional<int64_t> step;
    if (args.option("step")) step = args.int_option("step", 0);
    auto loaded = load_trained_model(target, step);
    config = parse_config(to_yaml(loaded.config), (target / "config.yaml").string(), args.sets);
    model = loaded.model;
    weights = "checkpoint step " + std::to_string(loaded.step);
  } else {
    if (args.option("step")) throw ConfigError("--step applies to a run dir, not a config file");
    config = load_config(target.string(), args.sets);
  }
  if (config.data.valid.empty())
    throw ConfigError(config.where("data.valid") + ": data.valid: no evaluation token file (pass --set data.valid=FILE)");
  LOOM_CHECK(std::filesystem::exists(config.data.valid), "data.valid: ", config.data.valid, " does not exist");
  const TokenFile data(config.data.valid);
  LOOM_CHECK(config.train.eval_batches > 0, "train.eval_batches is 0: nothing to evaluate");

  if (!model) {
    configure_threads(config.runtime);
    resolve_vocab(config, data);
    torch::manual_seed(static_cast<uint64_t>(config.run.seed));
    model = Gpt(config.model);
    if (config.model.init_from.empty()) {
      spdlog::warn("no model.init_from: evaluating the random init of run.seed={}", config.run.seed);
      weights = "random init";
    } else {
      load_weights_file(*model, config.model.init_from);
      weights = config.model.init_from;
    }
  }
  LOOM_CHECK(data.vocab_size() <= config.model.vocab_size, config.data.valid, " holds token ids up to ",
             data.vocab_size(), " but the model's vocabulary is ", config.model.vocab_size);
  // One process evaluates every slice: the same windows as any training layout.
  config.parallel.dp = config.parallel.tp = config.parallel.pp = 1;
  const torch::Device device = runtime_device(config.runtime);
  model->to(device);
  const Mesh mesh(config, 1, 0);
  const double loss = evaluate_loss(*model, data, config, mesh, device);
  const int64_t tokens = config.train.eval_batches * config.train.batch_size * config.data.seq_len;
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"loss", loss}, {"ppl", std::exp(loss)}, {"split", split}, {"tokens", tokens}}.dump()
              << std::endl;
  } else {
    std::cout << split << " loss " << loss << " | ppl " << std::exp(loss) << " | " << tokens << " tokens of "
              << config.data.valid << " | " << weights << std::endl;
  }
  return 0;
}

}  // namespace loom::cli
