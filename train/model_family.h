// The model families (model.arch): the one table of them, each entry what a family decides: its checks of
// the config and its model's shape (core/family_rules.h, which validation, the pipeline split, the parameter
// and memory estimates and `loom info` read), how its model is built, which Task trains it, what `loom bench`
// feeds it and its Hugging Face names. The built-in families are register_builtin_model_families()'s, each in
// its own file (train/gpt_family.cpp, train/encoder_decoder_family.cpp, train/bert_family.cpp). The Trainer, the pipeline runner,
// checkpoints, `loom eval`, `loom info`, `loom bench` and `loom export` take any family as it is.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/family_rules.h"
#include "models/hf_weights.h"
#include "models/model_stage.h"
#include "parallel/context_parallel_layout.h"
#include "train/task.h"

namespace loom {

// A trained model as Hugging Face's transformers loads it (`loom export`).
struct HfExport {
  std::vector<std::pair<std::string, torch::Tensor>> weights;  // under the family's names, CPU tensors
  nlohmann::ordered_json config;                               // config.json
  std::string names;                                           // which names, for the file's metadata and logs
};

struct ModelFamily {
  ModelArch arch;
  FamilyRules rules;
  // The model a config describes, split over `tp` (and its sequences over `cp`) as pipeline stage `stage`
  // (the whole model: the defaults), its weights drawn from the RNG as it stands. ZeRO-3 and activation
  // checkpointing come later, from outside (StagedModel::parallelize: the Trainer).
  std::function<std::shared_ptr<StagedModel>(const Config& config, const TensorParallelism& tp,
                                             const ModelStage& stage, const ContextParallelism& cp)>
      build;
  // The task: opens the data `data` asks for, checks that model.vocab_size covers it, then takes its model
  // from `model`.
  std::function<std::unique_ptr<Task>(const Config& config, TaskData data, const ModelSource& model)> make_task;
  // `loom bench`: sets `config` so that its task, made with TaskData::kSynthetic, trains on random data of
  // data.seq_len tokens a sequence, train.batch_size sequences a step, no files; ConfigError where it cannot.
  std::function<void(Config& config)> use_synthetic_data;
  // model.init_from: a file of the whole model's weights under its Hugging Face names into its model (a
  // pipeline stage takes its part, a TP rank its shard); `loom export`: its whole model's weights and
  // config.json. Null for a family with no Hugging Face counterpart (refused).
  std::function<void(StagedModel& model, const std::filesystem::path& file)> import_hf;
  std::function<HfExport(const ModelConfig& config, StagedModel& model, const SpecialTokenIds& tokens)> export_hf;
};

// Adds `family` to the table (replacing one of its arch) and registers its rules with core/.
void register_model_family(ModelFamily family);
// The built-in families; the loom executable's and the unit tests' main() call it before anything else.
void register_builtin_model_families();
// Throws Error for an arch with no family registered.
const ModelFamily& model_family(ModelArch arch);
// model.init_from into `model`, by its family's import_hf (the Trainer of a fresh run, `loom eval`).
void load_init_weights(const Config& config, StagedModel& model);

ModelFamily gpt_family();              // train/gpt_family.cpp
ModelFamily encoder_decoder_family();  // train/encoder_decoder_family.cpp
ModelFamily bert_family();             // train/bert_family.cpp

}  // namespace loom
