// Dynamic loss scaling for fp16 training (precision.dtype: fp16). fp16 gradients underflow unless the
// loss is multiplied up before backward; the scale is then divided out of the fp32 gradients before
// clipping and the optimizer. A step whose gradients hold inf/nan is skipped and the scale multiplied
// by the backoff factor; after growth_interval finite steps in a row it is multiplied by the growth
// factor. The scale and the count of finite steps are state a checkpoint carries.
// Disabled (every other dtype) the scale is 1 and unscaling only checks that the gradients are finite:
// the trainer skips a step with inf/nan gradients in every precision (train/nonfinite_guard.h).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "parallel/communicator.h"

namespace loom {

class LossScaler {
 public:
  LossScaler(const PrecisionConfig& precision);

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }

  torch::Tensor scale_loss(const torch::Tensor& loss) const;  // loss * scale

  // fp16 only: divides the gradients by the scale; true when every one is finite. With `shards`, each rank
  // holds a different part of the gradients and the answer is agreed over the group. (Without loss scaling
  // the trainer's finite check is gradient_norm's, optim/optimizer.h.)
  bool unscale(const std::vector<torch::Tensor>& parameters, Communicator* shards = nullptr);

  // After a step: backoff on overflow (the caller skipped the step), growth after enough finite steps.
  void update(bool finite);

  // (scale, growth_tracker) as a double tensor, for checkpoints.
  torch::Tensor state() const;
  void load_state(const torch::Tensor& state);

 private:
  bool enabled_;
  double scale_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
};

}  // namespace loom
