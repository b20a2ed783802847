// AdamW state in checkpoints, stored by parameter name and element range rather than by optimizer
// tensor, so that it loads under another layout: a ZeRO-1 shard of any DP size, or ZeRO-1 off. A
// rank's shard file holds the slices it owns; loading reassembles each parameter's moments from every
// file that holds a piece of them and cuts out what this rank's optimizer tensors need.
// Not here: the model's weights (checkpoint_weights.h, stored the same way) and group options such as lr
// (apply_group_options).
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/moe.h"
#include "parallel/gradient_sync.h"

namespace loom {

// A parameter as checkpoints store it: under expert parallelism (parallel.ep) a rank's stacked experts are rows
// of the whole (E, ...) tensor that every layout names alike (models/moe.h expert_placements): its whole shape
// and where this rank's elements start in it. Any other parameter is its own whole (offset 0).
struct StoredShape {
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel() const { return c10::multiply_integers(shape); }
};
StoredShape stored_shape(const std::map<const void*, ExpertPlacement>& placements, const torch::Tensor& parameter);

// The optimizer's tensors in its group order, each with the parameter elements it holds.
struct OptimizerLayout {
  torch::optim::AdamW* optimizer = nullptr;
  std::vector<std::vector<ParameterSlice>> slices;  // one entry per optimizer tensor
};

// The optimizer's tensors in its group order.
std::vector<torch::Tensor> optimizer_tensors(torch::optim::AdamW& optimizer);

// Every optimizer tensor is a whole parameter (no GradientSync, or ZeRO-1 off).
OptimizerLayout whole_parameter_layout(torch::optim::AdamW& optimizer);

void write_optimizer_state(torch::serialize::OutputArchive& archive, const OptimizerLayout& layout,
                           torch::nn::Module& model);

// Reading is in steps, so that a shard file is loaded once for its weights and its state: the moments this
// rank's optimizer tensors need start empty (unread_moments), take the pieces each shard file holds of them
// (add_parameter_moments), and are then installed (install_optimizer_state, which throws loom::Error naming
// the parameter when an element is in none of the files). Tensor-parallel resharding (checkpoint_reshard.h)
// reshapes the moments in between.
// One parameter's moments, flattened, as far as the files read cover them; step -1: no state saved.
struct ParameterMoments {
  torch::Tensor exp_avg, exp_avg_sq, covered;  // covered: bool, which elements were read
  int64_t step = -1;
};
// Zero and uncovered: the moments of the parameters named in `numels` (their element counts as stored), or
// of those `layout`'s optimizer tensors hold a piece of (in those tensors' dtype: fp32, also under bf16
// parameters).
std::map<std::string, ParameterMoments> unread_moments(const std::map<std::string, int64_t>& numels, torch::Dtype dtype);
std::map<std::string, ParameterMoments> unread_moments(const OptimizerLayout& layout, torch::nn::Module& model);
// Copies into `moments` the pieces of them that one shard file (`source`, for messages) holds.
void add_parameter_moments(torch::serialize::InputArchive& shard, const std::string& source,
                           std::map<std::string, ParameterMoments>& moments);
// unread_moments(numels) filled from `shards`, each loaded in turn.
std::map<std::string, ParameterMoments> read_parameter_moments(const std::vector<std::filesystem::path>& shards,
                                                               const std::map<std::string, int64_t>& numels,
                                                               torch::Dtype dtype);
// Gives every optimizer tensor of `layout` its part of the moments (which cover the model's parameters).
void install_optimizer_state(const std::map<std::string, ParameterMoments>& moments, const OptimizerLayout& layout,
                             torch::nn::Module& model);

}  // namespace loom
