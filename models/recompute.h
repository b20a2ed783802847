// Activation checkpointing: y = fn(x) whose forward keeps none of fn's intermediate activations, only x;
// backward runs fn again (with gradients) from x and back-propagates through that. The RNG state and the
// autocast state of the first run are restored for the second, so dropout masks and casts match and the
// gradients equal those of the plain fn(x). fn's parameters receive their gradients during that inner
// backward (as with PyTorch's reentrant torch.utils.checkpoint). LibTorch has no torch.utils.checkpoint:
// this is its C++ counterpart, built on a custom autograd function.
#pragma once
#include <torch/torch.h>

#include <functional>

#include "parallel/tensor_parallel_rng.h"

namespace loom {

using Recomputable = std::function<torch::Tensor(const torch::Tensor&)>;

// x: any shape; fn must outlive the backward pass (it is called again from there). Without grad mode or
// when x needs no gradient this is just fn(x). tp_rng: the tensor-parallel dropout stream fn draws from
// besides the default generator (null: none); its state is restored for the re-run too.
torch::Tensor recompute_in_backward(const Recomputable& fn, const torch::Tensor& x, TensorParallelRng* tp_rng = nullptr);

}  // namespace loom
