#include "core/family_rules.h"

#include <map>

#include "core/error.h"

namespace loom {
namespace {

// Filled at start-up by the family table (and by tests registering a family of their own).
std::map<ModelArch, FamilyRules>& registered_rules() {
  static std::map<ModelArch, FamilyRules> rules;
  return rules;
}

}  // namespace

void register_family_rules(ModelArch arch, FamilyRules rules) { registered_rules()[arch] = std::move(rules); }

const FamilyRules& family_rules(ModelArch arch) {
  const auto& rules = registered_rules();
  const auto it = rules.find(arch);
  if (it == rules.end())
    throw Error(std::string("model.arch=") + enum_name(arch) +
                ": no model family registered for it (register_builtin_model_families(), train/model_family.h)");
  return it->second;
}

ModelShape model_shape(const ModelConfig& model) { return family_rules(model.arch).shape(model); }

}  // namespace loom
