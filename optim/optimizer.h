// AdamW with two parameter groups (weight decay on matrices and embeddings only, never on biases or
// norm gains), learning-rate setting and global-norm gradient clipping.
#pragma once
#include <torch/torch.h>

#include <memory>

#include "core/config.h"

namespace loom {

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const OptimConfig& config);

// torch::load(optimizer) restores per-parameter state but not the group options: set them again.
void apply_group_options(torch::optim::AdamW& optimizer, const OptimConfig& config);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Scales gradients so their global L2 norm is at most max_norm (0: no clipping). Returns the norm before.
double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

}  // namespace loom
