// Data-parallel gradient averaging in flat buckets (parallel.bucket_mb). Every parameter's .grad is a
// view into its bucket's flat buffer, so accumulation over micro-batches writes straight into what is
// reduced. During the step's last backward a bucket's all-reduce starts as soon as all its gradients
// are accumulated (post-accumulate-grad hooks), overlapping the rest of backward; earlier micro-batches
// only accumulate. With a DP group of one there is no communication, just the flat buffers.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace loom {

class GradientSync {
 public:
  GradientSync(const std::vector<torch::Tensor>& parameters, Communicator& dp_group, double bucket_mb);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  void zero_grad();              // zeros the buffers in place (the .grad views stay)
  void prepare_last_backward();  // the next backward completes this step's gradients: reduce during it
  void finish();                 // starts what has not started, waits for all, divides by the DP size

  size_t bucket_count() const { return buckets_.size(); }
  // Seconds finish() spent waiting for communication that backward had not already hidden.
  double last_wait_s() const { return last_wait_s_; }

  void on_gradient_ready(size_t bucket);  // called by the hooks

 private:
  struct Bucket {
    torch::Tensor flat;
    std::vector<torch::Tensor> parameters;
    size_t ready = 0;
    std::shared_ptr<Work> work;
  };
  void launch(Bucket& bucket);

  Communicator& dp_group_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
  double last_wait_s_ = 0;
};

}  // namespace loom
