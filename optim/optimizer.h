// AdamW (the fused kernel, optim/fused_adamw.h) with two parameter groups (weight decay on matrices and embeddings only, never on biases or
// norm gains), learning-rate setting and global-norm gradient clipping.
#pragma once
#include <torch/torch.h>

#include <memory>

#include "core/config.h"
#include "parallel/communicator.h"
#include "parallel/gradient_sync.h"

namespace loom {

// {parameters that decay (matrices, embeddings), parameters that do not (biases, norm gains)}.
std::vector<std::vector<torch::Tensor>> weight_decay_groups(torch::nn::Module& model);

// groups: {decay, no decay}, as weight_decay_groups returns (or their ZeRO-1 shards).
std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<std::vector<torch::Tensor>>& groups,
                                                const OptimConfig& config);
std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const OptimConfig& config);

// torch::load(optimizer) restores per-parameter state but not the group options: set them again.
void apply_group_options(torch::optim::AdamW& optimizer, const OptimConfig& config);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// The global L2 norm of the gradients of `parameters` (those without a gradient are skipped).
// With `shards`, each rank holds a disjoint part of the gradients and the squared norms are summed over it.
// With a tensor-parallel group `tp` of more than one rank, the elements of parameters[i] in the ranges
// tp_sharded[i] belong to tensor-parallel shards (each TP rank holds its own slice: their squares are
// summed over the group) and the others to replicated parameters (identical on every TP rank: counted
// once). Under pipeline parallelism each stage holds its own parameters: the squares are summed over the
// PP group `pp`, except for the elements in `duplicated` (the last stage's copy of the tied embedding, whose
// gradient equals the first stage's), which are not counted. So every parameter counts exactly once, with
// or without ZeRO-1's flat shards. The squares are summed in double: however the gradients are cut, the
// norm is the same to ~1e-13 relative, far below a float's precision, so every layout clips by the same
// float coefficient. The same pass says whether this rank's own gradients are all finite (before any
// reduction; a norm beyond the float range, 3.4e38, counts as not finite: no gradient worth applying
// either), which is the trainer's non-finite check when there is no loss scaling.
struct ElementRange {
  int64_t first = 0;
  int64_t length = 0;
};
struct GradientNorm {
  double norm = 0;
  bool local_finite = true;
};
GradientNorm gradient_norm(const std::vector<torch::Tensor>& parameters, Communicator* shards = nullptr,
                           Communicator* tp = nullptr, const std::vector<std::vector<ElementRange>>& tp_sharded = {},
                           Communicator* pp = nullptr, const std::vector<std::vector<ElementRange>>& duplicated = {});

// Scales the gradients so their global L2 norm `norm` (gradient_norm's) is at most max_norm (0: no clipping).
void clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm, double norm);

// Per optimizer tensor, the element ranges that hold pieces of `parameters`.
std::vector<std::vector<ElementRange>> parameter_ranges(const std::vector<torch::Tensor>& parameters,
                                                        const std::vector<std::vector<ParameterSlice>>& slices);

// Per optimizer tensor (described by its parameter slices, GradientSync::optimizer_slices), the element
// ranges that hold tensor-parallel shards of `model` (models that declare shard layouts,
// parallel/tensor_parallel.h).
std::vector<std::vector<ElementRange>> tensor_parallel_ranges(const torch::nn::Module& model,
                                                              const std::vector<std::vector<ParameterSlice>>& slices);

}  // namespace loom
