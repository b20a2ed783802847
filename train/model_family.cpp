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
}

const ModelFamily& model_family(ModelArch arch) {
  const auto it = families().find(arch);
  if (it == families().end())
    throw Error(std::string("model.arch=") + enum_name(arch) + ": no model family registered for it (train/model_family.h)");
  return it->second;
}

}  // namespace loom
