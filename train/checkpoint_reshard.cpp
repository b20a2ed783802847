#include "train/checkpoint_reshard.h"

#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "parallel/tensor_parallel.h"
#include "train/checkpoint.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

// The names each old pipeline stage holds, from the manifest (a checkpoint without them has one stage).
std::vector<std::set<std::string>> stage_names(const nlohmann::json& manifest) {
  if (!manifest.contains("pipeline")) return std::vector<std::set<std::string>>(1);
  std::vector<std::set<std::string>> stages;
  for (const auto& names : manifest.at("pipeline").at("names")) stages.emplace_back(names.begin(), names.end());
  return stages;
}

}  // namespace

int64_t saved_shard_files(const nlohmann::json& layout) {
  // Expert parallelism writes a file per rank of the shard group too (each holding its experts).
  if (layout.value("zero", 0) < 1 && layout.value("ep", int64_t{1}) <= 1) return 1;
  // A layout without shard_size (written before hybrid sharding) was sharded over its whole dp.
  return layout.value("shard_size", layout.value("dp", int64_t{1})) * layout.value("cp", int64_t{1});
}

void load_resharded(const fs::path& dir, const nlohmann::json& manifest, const Mesh& mesh, torch::nn::Module& model,
                    const WeightLayout& weights, const OptimizerLayout* optimizer) {
  const auto& saved = manifest.at("layout");
  const int64_t old_tp = saved.value("tp", int64_t{1});
  // With ZeRO every shard-group rank's file holds a part of the weights and optimizer state.
  const int64_t saved_shards = saved_shard_files(saved);
  const int64_t tp = mesh.tp(), rank = mesh.coord(MeshAxis::kTp);
  std::map<std::string, ShardLayout> layouts;
  for (const auto& [name, l] : manifest.at("tensor_parallel").items())
    layouts[name] = ShardLayout{l.at("dim").get<int64_t>(), l.at("sections").get<std::vector<int64_t>>()};
  const auto old_stages = stage_names(manifest);
  const bool one_stage = !manifest.contains("pipeline");

  // The old stage holding a name: the first that has it (the tied embedding is on the first and last).
  auto owner = [&](const std::string& name) -> int64_t {
    for (size_t s = 0; s < old_stages.size(); ++s)
      if (one_stage || old_stages[s].count(name) > 0) return static_cast<int64_t>(s);
    throw Error("checkpoint " + dir.string() + " does not fit this model: no pipeline stage of it holds " + name +
                " (was the model config changed?)");
  };
  // This model's tensors (name -> whether a buffer) as the old (tp rank, stage) files hold them, whole, read
  // when first needed.
  std::map<std::string, bool> names;
  for (const auto& p : model.named_parameters()) names[p.key()] = false;
  for (const auto& b : model.named_buffers()) names[b.key()] = true;
  auto files_of = [&](int64_t k, int64_t s) {
    std::vector<fs::path> files;
    for (int64_t d = 0; d < saved_shards; ++d) files.push_back(dir / shard_file_name(d, k, s));
    return files;
  };
  std::map<std::pair<int64_t, int64_t>, std::map<std::string, torch::Tensor>> old_weights;
  std::set<int64_t> stages_used;
  auto stored = [&](int64_t k, const std::string& name) {
    const int64_t s = owner(name);
    auto found = old_weights.find({k, s});
    if (found == old_weights.end()) {
      found = old_weights.emplace(std::make_pair(k, s), read_whole_weights(files_of(k, s), names)).first;
      stages_used.insert(s);
    }
    auto value = found->second.find(name);
    if (value == found->second.end())
      throw Error((dir / shard_file_name(0, k, s)).string() + " does not fit this model: it has no " + name +
                  " (was the model config changed?)");
    return value->second;
  };
  // A split tensor: the old shards joined along its layout, then this rank's new share; a replicated
  // one: the first shard's copy (every TP rank held the same).
  auto reshard = [&](const std::string& name, const std::function<torch::Tensor(int64_t)>& of_shard) {
    const auto layout = layouts.find(name);
    if (layout == layouts.end()) return of_shard(0);
    std::vector<torch::Tensor> shards;
    for (int64_t k = 0; k < old_tp; ++k) shards.push_back(of_shard(k));
    return take_shard(join_shards(shards, layout->second), layout->second, tp, rank);
  };

  // This rank's share of every tensor, whole, then what `weights` holds of it (all checked before any is written).
  std::map<std::string, torch::Tensor> values;
  for (const auto& [name, is_buffer] : names) values[name] = reshard(name, [&](int64_t k) { return stored(k, name); });
  install_whole_weights(values, weights,
                        "checkpoint " + dir.string() + " resharded from tp=" + std::to_string(old_tp) + " to tp=" +
                            std::to_string(tp));
  if (optimizer == nullptr) return;

  // AdamW moments: each old TP rank's, by parameter name over its own shard (from the files of every old
  // stage that held one of this model's parameters), then resharded like the weights.
  std::vector<std::map<std::string, ParameterMoments>> old_moments(static_cast<size_t>(old_tp));
  for (int64_t k = 0; k < old_tp; ++k) {
    std::map<std::string, int64_t> numels;
    for (const auto& p : model.named_parameters()) numels[p.key()] = stored(k, p.key()).numel();
    std::vector<fs::path> files;
    for (int64_t s : stages_used)
      for (const auto& file : files_of(k, s)) files.push_back(file);
    old_moments[static_cast<size_t>(k)] = read_parameter_moments(files, numels, torch::kFloat);
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
               const auto& m = old_moments[static_cast<size_t>(k)].at(name);
               if (!m.covered.all().item<bool>())
                 throw Error("the checkpoint's optimizer state lacks part of " + name + " (a shard file is missing)");
               return (squared ? m.exp_avg_sq : m.exp_avg).view(stored(k, name).sizes());
             }).flatten();
    };
    auto exp_avg = moment(false);
    moments[name] = {exp_avg, moment(true), torch::ones({exp_avg.numel()}, torch::kBool), old_moments[0].at(name).step};
  }
  install_optimizer_state(moments, *optimizer, model);
}

}  // namespace loom
