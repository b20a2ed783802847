// `loom eval CONFIG_OR_RUN_DIR [--set ...] [--split valid|test] [--step S] [--beam N] [--translations FILE]
// [--json]`: the mean
// loss and perplexity of a model on its evaluation data, computed as the Trainer's validation
// (train/evaluate.h: train.eval_batches batches of train.batch_size sequences). For a translation model
// (model.arch: transformer) also the quality of its translations of the whole evaluation set, decoded as
// decode.* says (--beam overrides decode.beam): exact match, and corpus BLEU (train/bleu.h, as sacreBLEU)
// of the detokenized translations against the detokenized references when the run has a tokenizer;
// --translations FILE writes the translations there, one line per pair in the order of the data.
//   - a run dir: its newest (or --step) checkpoint, data from the checkpoint's config; --set may change the
//     data and train.* keys but not model.* (the weights fix the model);
//   - a config file: the model its model.* keys describe, with weights from model.init_from (else the
//     random init of run.seed, with a warning).
// --split test evaluates data.test instead of data.valid (the synthetic translation tasks have one
// evaluation set: --split valid). Runs in one process on runtime.device.
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/corpus/data_files.h"
#include "train/evaluate.h"
#include "train/inference.h"
#include "train/model_family.h"
#include "train/runtime.h"

namespace loom::cli {
namespace {

bool sets_key(const std::vector<std::string>& sets, const std::string& prefix) {
  for (const auto& s : sets)
    if (s.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

int eval_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {"split", "step", "beam", "translations"}, {"json"}, 1,
                               "loom eval CONFIG_OR_RUN_DIR [--set key.path=value ...] [--split valid|test] [--step S] "
                               "[--beam N] [--translations FILE] [--json]");
  const std::string split = args.option_or("split", "valid");
  if (split != "valid" && split != "test") throw ConfigError("--split: '" + split + "' is not valid or test");
  const std::filesystem::path target = args.positional[0];
  // --beam N is decode.beam=N, validated (and bounded) with the other keys.
  auto sets = args.sets;
  if (const auto beam = args.option("beam")) sets.push_back("decode.beam=" + *beam);

  Config config;
  std::optional<LoadedModel> loaded;
  std::string weights;
  if (std::filesystem::is_directory(target)) {
    if (sets_key(args.sets, "model."))
      throw ConfigError("--set model.*: a run dir's checkpoint fixes the model; evaluate a config file to change it");
    std::optional<int64_t> step;
    if (args.option("step")) step = args.int_option("step", 0);
    loaded = load_trained_model(target, step);
    config = parse_config(to_yaml(loaded->config), (target / "config.yaml").string(), sets);
    weights = "checkpoint step " + std::to_string(loaded->step);
  } else {
    if (args.option("step")) throw ConfigError("--step applies to a run dir, not a config file");
    config = load_config(target.string(), sets);
    configure_cpu(config.runtime);
  }
  if (split == "test") {
    if (config.data.synthetic != SyntheticTask::kNone)
      throw ConfigError("--split test: synthetic pairs have one evaluation set; use --split valid");
    if (config.data.test.empty())
      throw ConfigError(config.where("data.test") + ": data.test: no test file for --split test (set it, or pass "
                        "--set data.test=FILE)");
    if (std::filesystem::is_directory(config.data.test))
      throw ConfigError(config.where("data.test") + ": data.test: " + config.data.test + " is a directory: a prepared "
                        "directory holds a train and a valid split; data.test takes a token file");
    config.data.valid = config.data.test;
  }
  LOOM_CHECK(config.train.eval_batches > 0, "train.eval_batches is 0: nothing to evaluate");

  const torch::Device device = runtime_device(config.runtime);
  if (loaded) loaded->model->to(device);  // --set runtime.device may differ from the run's
  // One process evaluates every slice with the whole model: the same sequences as any training layout.
  config.parallel.set_one_process();
  config.model.vocab_size = planned_vocab_size(config);  // a config file's 0: the tokenizer's or the data's
  auto task = make_task(config, device, TaskData::kEvaluation, loaded ? loaded->model : nullptr);
  if (!loaded) {
    if (config.model.init_from.empty()) {
      spdlog::warn("no model.init_from: evaluating the random init of run.seed={}", config.run.seed);
      weights = "random init";
    } else {
      load_init_weights(config, task->model());
      weights = config.model.init_from;
    }
  }
  if (task->eval_size() > 0)  // a fixed set (translation pairs) is evaluated whole
    config.train.eval_batches = (task->eval_size() + config.train.batch_size - 1) / config.train.batch_size;
  const Mesh mesh(config, 1, 0);
  const EvalLoss result = evaluate_loss(*task, config, mesh, device);
  nlohmann::json out = {{"loss", result.loss}, {"ppl", std::exp(result.loss)}, {"split", split}, {"tokens", result.tokens}};
  std::string quality;
  for (const auto& [name, value] : result.metrics) {  // the task's other measures (BERT's MLM accuracy)
    out[name] = value;
    quality += " | " + name + " " + std::to_string(value);
  }
  if (const auto scores = task->score_outputs(config)) {  // a translation task: its decoded translations' quality
    out.update(scores->fields);
    quality = scores->summary;
    if (const auto file = args.option("translations")) {
      std::string text;
      for (const auto& line : scores->lines) text += line + '\n';
      write_file_atomic(*file, text);
    }
  }
  if (args.flag("json")) {
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << split << " loss " << result.loss << " | ppl " << std::exp(result.loss) << quality << " | "
              << result.tokens << " tokens of " << task->eval_data_name() << " | " << weights << std::endl;
  }
  return 0;
}

}  // namespace loom::cli
