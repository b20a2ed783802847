#include "train/checkpoint_reshard.h"

#include <functional>
#include <map>

#include "core/error.h"
#include "parallel/tensor_parallel.h"
#include "train/checkpoint.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

using Named = std::map<std::string, torch::Tensor>;

// The stored tensors of one shard's model archive by full name, walking the current model's structure
// (the names are the same in every layout; only the shapes of the split parameters differ).
void read_named(const torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& prefix,
                const fs::path& shard, Named& out) {
  auto take = [&](const std::string& key, bool is_buffer) {
    torch::Tensor stored;
    if (!archive.try_read(key, stored, is_buffer))
      throw Error(shard.string() + " does not fit this model: it has no " + prefix + key + " (was the model config changed?)");
    out[prefix + key] = stored;
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) take(p.key(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false)) take(b.key(), true);
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive))
      throw Error(shard.string() + " does not fit this model: it has no " + prefix + child.key());
    read_named(*child.value(), child_archive, prefix + child.key() + ".", shard, out);
  }
}

}  // namespace

void load_tp_resharded(const fs::path& dir, const nlohmann::json& manifest, const Mesh& mesh, torch::nn::Module& model,
                       const OptimizerLayout* optimizer) {
  const auto& saved = manifest.at("layout");
  const int64_t old_tp = saved.at("tp").get<int64_t>();
  // With ZeRO-1 every DP rank's file holds a part of the optimizer state; the model is in each.
  const int64_t saved_dp = saved.value("zero", 0) == 1 ? saved.at("dp").get<int64_t>() : 1;
  const int64_t tp = mesh.tp(), rank = mesh.coords().tp, pp = mesh.coords().pp;
  std::map<std::string, ShardLayout> layouts;
  for (const auto& [name, l] : manifest.at("tensor_parallel").items())
    layouts[name] = ShardLayout{l.at("dim").get<int64_t>(), l.at("sections").get<std::vector<int64_t>>()};

  std::vector<Named> model_shards(old_tp);
  for (int64_t k = 0; k < old_tp; ++k) {
    const auto path = dir / shard_file_name(0, k, pp);
    torch::serialize::InputArchive shard, model_archive;
    shard.load_from(path.string());
    shard.read("model", model_archive);
    read_named(model, model_archive, "", path, model_shards[k]);
  }
  // A split tensor: the old shards joined along its layout, then this rank's new share; a replicated
  // one: the first shard's copy (every TP rank held the same).
  auto reshard = [&](const std::string& name, const std::function<torch::Tensor(int64_t)>& of_shard) {
    const auto layout = layouts.find(name);
    if (layout == layouts.end()) return of_shard(0);
    std::vector<torch::Tensor> shards;
    for (int64_t k = 0; k < old_tp; ++k) shards.push_back(of_shard(k));
    return take_shard(join_shards(shards, layout->second), layout->second, tp, rank);
  };

  std::vector<std::pair<torch::Tensor, torch::Tensor>> assignments;  // (model tensor, value), all checked first
  auto add = [&](const std::string& name, const torch::Tensor& target) {
    auto value = reshard(name, [&](int64_t k) { return model_shards[k].at(name); });
    if (value.sizes() != target.sizes())
      throw Error("checkpoint " + dir.string() + " does not fit this model: " + name + " resharded from tp=" +
                  std::to_string(old_tp) + " to tp=" + std::to_string(tp) + " is " + c10::str(value.sizes()) +
                  " but the model has " + c10::str(target.sizes()) + " (was the model config changed?)");
    assignments.emplace_back(target, value);
  };
  for (const auto& p : model.named_parameters()) add(p.key(), p.value());
  for (const auto& b : model.named_buffers()) add(b.key(), b.value());
  {
    torch::NoGradGuard no_grad;
    for (auto& [target, value] : assignments) target.copy_(value);
  }
  if (optimizer == nullptr) return;

  // AdamW moments: each old TP rank's, by parameter name over its own shard, then resharded like the weights.
  std::vector<std::map<std::string, ParameterMoments>> old_moments(old_tp);
  for (int64_t k = 0; k < old_tp; ++k) {
    std::map<std::string, int64_t> numels;
    for (const auto& [name, t] : model_shards[k]) numels[name] = t.numel();
    std::vector<fs::path> files;
    for (int64_t d = 0; d < saved_dp; ++d) files.push_back(dir / shard_file_name(d, k, pp));
    old_moments[k] = read_parameter_moments(files, numels, torch::kFloat);
  }
  std::map<std::string, ParameterMoments> moments;
  for (const auto& p : model.named_parameters()) {
    const std::string& name = p.key();
    if (old_moments[0].at(name).step < 0) {
      moments[name] = {};  // no step had touched it: stays fresh
      continue;
    }
    auto moment = [&](bool squared) {
      return reshard(name, [&](int64_t k) {
               const auto& m = old_moments[k].at(name);
               if (!m.covered.all().item<bool>())
                 throw Error("the checkpoint's optimizer state lacks part of " + name + " (a shard file is missing)");
               return (squared ? m.exp_avg_sq : m.exp_avg).view(model_shards[k].at(name).sizes());
             }).flatten();
    };
    auto exp_avg = moment(false);
    moments[name] = {exp_avg, moment(true), torch::ones({exp_avg.numel()}, torch::kBool), old_moments[0].at(name).step};
  }
  install_optimizer_state(moments, *optimizer, model);
}

}  // namespace loom
