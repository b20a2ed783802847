#include "train/expert_parallel.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "models/moe.h"

namespace loom {
namespace {

std::set<const void*> expert_tensors(torch::nn::Module& model) {
  std::set<const void*> out;
  for (const auto& p : model.named_parameters())
    if (is_expert_parameter(p.key())) out.insert(p.value().unsafeGetTensorImpl());
  return out;
}

}  // namespace

void split_experts(torch::nn::Module& model, const Mesh& mesh) {
  if (mesh.ep() > 1) keep_local_experts(model, mesh.device_group(kExpertAxes));
}

std::vector<ShardedParameters> sharded_parameters(torch::nn::Module& model, const Mesh& mesh,
                                                  const std::vector<std::vector<torch::Tensor>>& groups) {
  ShardedParameters dense{groups, &mesh.device_group(kShardAxes), &mesh.device_group(kReplicaAxes)};
  if (mesh.ep() == 1) return {dense};
  const auto experts = expert_tensors(model);
  ShardedParameters expert{{}, &mesh.device_group(kExpertShardAxes), &mesh.device_group(kReplicaAxes),
                           mesh.size(kDataParallelAxes)};
  expert.sparse = true;  // a rank whose experts got no row has no gradient for them
  for (auto& group : dense.groups) {
    expert.groups.emplace_back();
    std::vector<torch::Tensor> kept;
    for (auto& p : group) (experts.count(p.unsafeGetTensorImpl()) ? expert.groups.back() : kept).push_back(p);
    group = std::move(kept);
  }
  return {dense, expert};
}

GradientNorm expert_parallel_gradient_norm(torch::nn::Module& model, const Mesh& mesh, bool sharded,
                                           const std::vector<torch::Tensor>& parameters,
                                           const std::vector<std::vector<ParameterSlice>>& slices,
                                           const std::vector<std::vector<ElementRange>>& tp_sharded,
                                           const std::vector<std::vector<ElementRange>>& duplicated) {
  LOOM_CHECK(slices.size() == parameters.size(), "gradient norm: one slice list per optimizer tensor");
  LOOM_CHECK(tp_sharded.empty() || tp_sharded.size() == parameters.size(), "gradient norm: one tp range list per tensor");
  LOOM_CHECK(duplicated.empty() || duplicated.size() == parameters.size(), "gradient norm: one duplicated list per tensor");
  const auto experts = expert_tensors(model);
  std::vector<torch::Tensor> dense, expert;
  std::vector<std::vector<ElementRange>> dense_tp, dense_duplicated;
  for (size_t i = 0; i < parameters.size(); ++i) {
    // A bucket (so an optimizer tensor) holds one entry's parameters; a shard of padding alone holds none.
    const bool is_expert = !slices[i].empty() && experts.count(slices[i].front().parameter.unsafeGetTensorImpl()) > 0;
    if (is_expert) {
      expert.push_back(parameters[i]);
      continue;
    }
    dense.push_back(parameters[i]);
    dense_tp.push_back(tp_sharded.empty() ? std::vector<ElementRange>{} : tp_sharded[i]);
    if (!duplicated.empty()) dense_duplicated.push_back(duplicated[i]);
  }
  Communicator* dense_sum = sharded ? &mesh.host_group(kShardAxes) : nullptr;
  Communicator* expert_sum = sharded ? &mesh.host_group(kShardAxes) : &mesh.host_group(kExpertAxes);
  Communicator& tp = mesh.host_group(MeshAxis::kTp);
  Communicator& pp = mesh.host_group(MeshAxis::kPp);
  // Dense: TP shards summed over the TP group, the rest counted once (as without ep). Experts: whole on
  // every TP rank (identical gradients: counted once), each pipeline stage its own.
  const auto d = gradient_norm(dense, dense_sum, &tp, dense_tp, &pp, dense_duplicated);
  const auto e = gradient_norm(expert, expert_sum, nullptr, {}, &pp, {});
  GradientNorm out;
  out.norm = std::sqrt(d.norm * d.norm + e.norm * e.norm);
  out.local_finite = d.local_finite && e.local_finite;
  return out;
}

}  // namespace loom
