#include "train/model_family.h"

#include <map>

#include "core/error.h"

namespace loom {
namespace {

std::map<ModelArch, ModelFamily>& families() {
  static std::map<ModelArch, ModelFamily> table;
  return table;
}

}  // namespace

void register_model_family(ModelFamily family) {
  register_family_rules(family.arch, family.rules);
  families()[family.arch] = std::move(family);
}

void register_builtin_model_families() {
  register_model_family(gpt_family());
  register_model_family(encoder_decoder_family());
  register_model_family(bert_family());
}

const ModelFamily& model_family(ModelArch arch) {
  const auto it = families().find(arch);
  if (it == families().end())
    throw Error(std::string("model.arch=") + enum_name(arch) + ": no model family registered for it (train/model_family.h)");
  return it->second;
}

void load_init_weights(const Config& config, StagedModel& model) {
  const ModelFamily& family = model_family(config.model.arch);
  if (!family.import_hf)
    throw Error("model.init_from: " + config.model.init_from + ": importing weights into model.arch=" +
                enum_name(config.model.arch) + " is not available");
  family.import_hf(model, config.model.init_from);
}

}  // namespace loom
