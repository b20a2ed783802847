// The model families (model.arch), each how its model is built and which Task trains it: the one table of
// them is model_families() in model_family.cpp. Adding a family is its model (models/, built from
// models/model_stage.h's pieces), its Task (train/), a ModelArch value (core/config_enums.h) and its entry
// there; the Trainer, the pipeline runner, checkpoints, `loom eval` and make_task() take it as it is.
#pragma once
#include <functional>
#include <memory>

#include "core/config.h"
#include "models/model_stage.h"
#include "parallel/context_parallel_layout.h"
#include "train/task.h"

namespace loom {

struct ModelFamily {
  ModelArch arch;
  // The model a config describes, split over `tp` (and its sequences over `cp`) as pipeline stage `stage`
  // (the whole model: the defaults), its weights drawn from the RNG as it stands, with
  // train.activation_checkpointing where the family recomputes.
  std::function<std::shared_ptr<torch::nn::Module>(const Config& config, const TensorParallelism& tp,
                                                   const ModelStage& stage, const ContextParallelism& cp)>
      build;
  // The task: opens the data `data` asks for, checks that model.vocab_size covers it, then takes its model
  // from `model`. lm_batches: replaces data.train for a family trained on LM windows; others refuse them.
  std::function<std::unique_ptr<Task>(const Config& config, TaskData data, const ModelSource& model,
                                      std::unique_ptr<LmBatches> lm_batches)>
      make_task;
};

const ModelFamily& model_family(ModelArch arch);

}  // namespace loom
