// ZeRO-3's side of a model's forward (parallel.zero: 3): a unit is a set of parameters gathered and freed
// together (each block; the embeddings with the final norm and head). LibTorch has no module hooks, so a
// model's own stage forward calls these around each unit, as it takes TensorParallelism: the model says
// where a unit starts and ends, the implementation (parallel/unit_gathers.h) what that costs. Unit 0 is
// the ends unit (gathered at the first forward of a step, kept until the step's gradients are reduced);
// units 1..n are the blocks in forward order (the encoder-decoder's encoder blocks, then its decoder blocks).
// A pipeline stage's units are its own ends and blocks.
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
};

// x itself; in backward, the gradient reaching x first calls units->before_backward(unit). Put on a unit's
// output, it runs before any of the unit's own backward (and before an activation checkpoint's recompute
// inside the unit). Without grad mode or without units: x, nothing recorded.
torch::Tensor gather_before_backward(const torch::Tensor& x, ParameterUnits* units, size_t unit);

// A unit's forward between before_forward and after_forward, its output passed through
// gather_before_backward; without units just forward(). What a model's stage forward wraps each block in.
template <class Forward>
torch::Tensor run_unit(ParameterUnits* units, size_t unit, Forward&& forward) {
  if (units == nullptr) return forward();
  units->before_forward(unit);
  auto out = gather_before_backward(forward(), units, unit);
  units->after_forward(unit);
  return out;
}

}  // namespace loom
