#include "train/model_family.h"

#include "core/error.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"
#include "train/lm_task.h"
#include "train/translation_task.h"

namespace loom {
namespace {

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {
      {ModelArch::kGpt,
       [](const Config& config, const TensorParallelism& tp, const ModelStage& stage, const ContextParallelism& cp) {
         Gpt model(config.model, tp, stage, cp);
         model->set_activation_checkpointing(config.train.activation_checkpointing);
         return std::static_pointer_cast<torch::nn::Module>(model.ptr());
       },
       make_lm_task},
      {ModelArch::kTransformer,
       [](const Config& config, const TensorParallelism& tp, const ModelStage& stage, const ContextParallelism& cp) {
         LOOM_CHECK(cp.size() == 1, "the encoder-decoder is not context-parallel (parallel.cp)");
         EncoderDecoder model(config.model, tp, stage);
         model->set_activation_checkpointing(config.train.activation_checkpointing);
         return std::static_pointer_cast<torch::nn::Module>(model.ptr());
       },
       [](const Config& config, TaskData data, const ModelSource& model, std::unique_ptr<LmBatches> lm_batches) {
         LOOM_CHECK(lm_batches == nullptr, "synthetic LM batches feed a gpt model only");
         return make_translation_task(config, data, model);
       }},
  };
  return families;
}

}  // namespace

const ModelFamily& model_family(ModelArch arch) {
  for (const auto& family : model_families())
    if (family.arch == arch) return family;
  throw Error(std::string("model.arch=") + enum_name(arch) + " has no entry in model_families() (train/model_family.cpp)");
}

}  // namespace loom
