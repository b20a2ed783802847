// Steps with a non-finite loss or non-finite gradients (any precision) are skipped, counted, and after
// train.max_bad_steps of them in a row the run stops naming the step, the rank and what was non-finite.
// The decision is agreed over every rank (one small max-reduction per step), so no rank steps its
// optimizer while another skips, and none waits for a peer that has stopped.
// What a skipped step does, chosen so that resume stays exact with nothing new to restore: the step
// counter, the token count and the data position advance (the batch that blew up is not retried) and so
// does the learning rate, a function of the step; the weights and AdamW's moments and bias-correction
// count do not. fp16 gradient overflow with a finite loss is the loss scaler's business (skipped, scale
// backed off) and only counts as bad once the scale is down to 1, where backing off can no longer help.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>

#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "train/checkpoint.h"

namespace loom {

// What every rank agreed about one step.
struct StepHealth {
  bool update = true;            // the optimizer steps
  bool gradients_finite = true;  // no rank's gradients held inf/nan (what the loss scaler backs off on)
  bool bad = false;              // counts towards train.max_bad_steps
  std::string what;              // bad: "non-finite loss (nan) on rank 1 (dp1-tp0-pp0)"
};

class NonFiniteGuard {
 public:
  explicit NonFiniteGuard(int64_t max_bad_steps) : max_bad_steps_(max_bad_steps) {}

  // Collective over mesh.world(). local_loss: this rank's loss (any finite stand-in when only the
  // gradients matter); gradients_finite: this rank's gradients after the sync and unscaling;
  // overflow_expected: fp16 with room to back off. describe_gradients names this rank's first non-finite
  // gradient; it is called only on a bad step. Updates state.skipped_steps and state.bad_streak and throws
  // loom::Error when the streak reaches max_bad_steps (0: never).
  StepHealth check(int64_t step, double local_loss, bool gradients_finite, bool overflow_expected, const Mesh& mesh,
                   const std::function<std::string()>& describe_gradients, TrainState& state) const;

 private:
  int64_t max_bad_steps_;
};

// "gradient of blocks.0.mlp.up.weight": the model parameter behind this rank's first optimizer tensor
// whose gradient holds inf/nan (slices: GradientSync::optimizer_slices), "gradients" if none does.
std::string first_nonfinite_gradient(const std::vector<torch::Tensor>& optimizer_parameters,
                                     const std::vector<std::vector<ParameterSlice>>& slices,
                                     const torch::nn::Module& model);

}  // namespace loom
