// Activation checkpointing: y = fn(x) whose forward keeps none of fn's intermediate activations, only x;
// backward runs fn again (with gradients) from x and back-propagates through that. fn may be given as
// segments, fn = segments[k-1](...segments[0](x)): backward then recomputes and back-propagates one segment
// at a time, last first, each from its input recomputed without gradients from x, so only one segment's
// activations are alive at once (at the cost of re-running the earlier segments once more each). The RNG
// state and the autocast state of the first run are restored for each re-run, so dropout masks and casts
// match and the gradients equal those of the plain fn(x). fn's parameters receive their gradients during
// that inner backward (as with PyTorch's reentrant torch.utils.checkpoint). LibTorch has no
// torch.utils.checkpoint: this is its C++ counterpart, built on a custom autograd function.
// Besides x, every segment may read side tensors (masks, packed documents' positions, the encoder output a
// decoder block's cross-attention reads), saved with x for the re-runs; a side tensor that needs gradient
// gets the sum of what the segments send it.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "parallel/tensor_parallel_rng.h"

namespace loom {

// What every segment reads besides x, in an order the caller fixes; any of them may be undefined.
using RecomputeSide = std::vector<torch::Tensor>;
// y = fn(x, side)
using Recomputable = std::function<torch::Tensor(const torch::Tensor& x, const RecomputeSide& side)>;
using RecomputeSegments = std::vector<Recomputable>;

// x: any shape; segments (at least one) must outlive the backward pass (they are called again from there).
// Without grad mode or when neither x nor a side tensor needs gradient this is just fn(x). tp_rng: the
// tensor-parallel dropout stream fn draws from besides the default generator (null: none); its state is
// restored for re-runs too.
torch::Tensor recompute_in_backward(const RecomputeSegments& segments, const torch::Tensor& x,
                                   TensorParallelRng* tp_rng = nullptr, const RecomputeSide& side = {});

// Whether the calling thread is re-running segments inside a backward: a layer that counts what its
// forward saw (the MoE's expert load, models/moe.h) counts the first run only.
bool recomputing();

// What layers keep from a recompute_in_backward call's first run for its re-runs, one entry per layer (its
// address): the MoE's exchanges' results, so that a re-run does no communication (models/moe.h). One stash
// per call, alive as long as the call's backward node (freed with the graph).
class RecomputeStash : public torch::CustomClassHolder {
 public:
  std::shared_ptr<void>& entry(const void* layer) { return entries_[layer]; }

 private:
  std::map<const void*, std::shared_ptr<void>> entries_;
};
// The stash of the recompute_in_backward call running on this thread (its first run, or a re-run in
// backward: recomputing() tells which); null outside one.
RecomputeStash* recompute_stash();

}  // namespace loom
