// What the trainer does for expert parallelism (parallel.ep) besides the MoE layers' own dispatch
// (models/moe_dispatch.h): it splits the model's experts over the ep group, makes the expert parameters a
// second entry of the gradient sync (averaged and ZeRO-sharded over the expert-data-parallel ranks, the
// ranks holding the same experts; parallel/mesh.h kExpertShardAxes), and measures the gradient norm counting
// each expert once. Without ep (ep 1) there is one entry, as for a dense model.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "optim/optimizer.h"
#include "parallel/mesh.h"
#include "parallel/sharding.h"

namespace loom {

// Under ep > 1 every MoE layer keeps only this rank's experts (after the whole model was initialised or
// imported, so the values are the single process's). Nothing otherwise.
void split_experts(torch::nn::Module& model, const Mesh& mesh);

// The gradient sync's entries: {dense parameters over dp x cp} and, under ep > 1, {experts over their
// expert-data-parallel group, averaged over all of dp x cp}. `groups`: the optimizer groups
// (weight_decay_groups), in the same group order in both entries.
std::vector<ShardedParameters> sharded_parameters(torch::nn::Module& model, const Mesh& mesh,
                                                  const std::vector<std::vector<torch::Tensor>>& groups);

// The global gradient norm under ep > 1: the dense parameters as without ep (their squares summed over the
// shard group when sharded, TP shards over the TP group, the replicated ones counted once, each pipeline
// stage its own, the last stage's tied embedding copy not counted: tp_sharded and duplicated as
// optim/optimizer.h gradient_norm takes them, per optimizer tensor); the experts' over the shard group when
// sharded (dp x cp holds every expert shard once) or else over the ep group (each rank its own experts), and
// over the pipeline stages, never over TP (every TP rank holds the same experts with the same gradients).
// parameters/slices: the optimizer's tensors and the parameter elements each holds (GradientSync).
GradientNorm expert_parallel_gradient_norm(torch::nn::Module& model, const Mesh& mesh, bool sharded,
                                           const std::vector<torch::Tensor>& parameters,
                                           const std::vector<std::vector<ParameterSlice>>& slices,
                                           const std::vector<std::vector<ElementRange>>& tp_sharded = {},
                                           const std::vector<std::vector<ElementRange>>& duplicated = {});

}  // namespace loom
