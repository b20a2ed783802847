// ZeRO-3's side of a model's forward (parallel.zero: 3): a unit is a set of parameters gathered and freed
// together (each block; the embeddings with the final norm and head). LibTorch has no module hooks, so the
// stage forward calls these around each unit, through its BlockRunner (models/block_runner.h, the one place
// a model's blocks and ends run): the model says where a unit starts and ends, the implementation
// (parallel/unit_gathers.h) what that costs. Unit 0 is
// the ends unit, units 1..n are the blocks in forward order (the encoder-decoder's encoder blocks, then its
// decoder blocks). A pipeline stage's units are its own ends and blocks.
// The ends serve the embeddings before the blocks and the head after them. A model whose embeddings'
// backward needs no weights (a lookup's gradient is a scatter of its output's) runs them in run_embeddings
// and its head in run_head: the ends are then gathered for the embeddings, freed over the blocks, gathered
// again for the head and kept for the head's backward, and freed when that is done (the GPT). A model
// that only calls before_forward(0) (BlockRunner::keep_ends) keeps them gathered until the step's gradients
// are reduced (the encoder-decoder: its pre-norm encoder's final norm, in the ends, runs between its blocks).
#pragma once
#include <torch/torch.h>

#include <cstddef>

namespace loom {

class ParameterUnits {
 public:
  virtual ~ParameterUnits() = default;
  // The unit's parameters hold their values from here until after_forward (waits for its gather, which
  // may have been started earlier, and starts the next unit's: prefetch).
  virtual void before_forward(size_t unit) = 0;
  // The unit's forward is done: its parameters may be freed (parallel.reshard_after_forward).
  virtual void after_forward(size_t unit) = 0;
  // In backward, before the unit's own backward: gather it again if it was freed, prefetch the one before.
  virtual void before_backward(size_t unit) = 0;
  // The head's forward, after the blocks: the ends unit again, kept for the head's backward.
  virtual void before_head() = 0;
  // In backward, the head's own backward is done: the ends may be freed until the next forward.
  virtual void after_head_backward() = 0;
};

// x itself; in backward, the gradient reaching x first calls units->before_backward(unit). Put on a unit's
// output, it runs before any of the unit's own backward (and before an activation checkpoint's recompute
// inside the unit). Without grad mode or without units: x, nothing recorded.
torch::Tensor gather_before_backward(const torch::Tensor& x, ParameterUnits* units, size_t unit);

// x itself; in backward, the gradient reaching x (the head's input: the head's backward is done) calls
// units->after_head_backward(). Without grad mode or without units: x, nothing recorded.
torch::Tensor release_after_head_backward(const torch::Tensor& x, ParameterUnits* units);

// A unit's forward between before_forward and after_forward, its output passed through
// gather_before_backward; without units just forward(). What BlockRunner wraps each block in.
template <class Forward>
torch::Tensor run_unit(ParameterUnits* units, size_t unit, Forward&& forward) {
  if (units == nullptr) return forward();
  units->before_forward(unit);
  auto out = gather_before_backward(forward(), units, unit);
  units->after_forward(unit);
  return out;
}

// The embeddings: the ends unit's forward before the blocks, after which the ends may be freed (their
// backward must need no weights, as a lookup's does not).
template <class Forward>
torch::Tensor run_embeddings(ParameterUnits* units, Forward&& forward) {
  if (units == nullptr) return forward();
  units->before_forward(0);
  auto out = forward();
  units->after_forward(0);
  return out;
}

// The head (final norm, output layer: whatever of the ends runs after the blocks) on `hidden`: the ends
// gathered for it, and gathered again before its backward (its output through gather_before_backward),
// then freed once its backward reaches `hidden`.
template <class Forward>
torch::Tensor run_head(ParameterUnits* units, const torch::Tensor& hidden, Forward&& forward) {
  if (units == nullptr) return forward(hidden);
  const auto input = release_after_head_backward(hidden, units);
  units->before_head();
  return gather_before_backward(forward(input), units, 0);
}

}  // namespace loom
