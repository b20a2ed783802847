// Data-parallel gradient averaging in flat buckets (parallel.bucket_mb), and ZeRO-1 (parallel.zero: 1).
// Every parameter's .grad is a view into its bucket's flat buffer, so accumulation over micro-batches
// writes straight into what is reduced. During the step's last backward a bucket's reduction starts as
// soon as all its gradients are accumulated (post-accumulate-grad hooks), overlapping the rest of
// backward; earlier micro-batches only accumulate. A bucket never mixes parameter groups (weight decay
// or not), so a bucket shard belongs to one optimizer group.
//   zero 0: all-reduce each bucket; the optimizer steps the parameters themselves.
//   zero 1: the parameters become views into padded flat buffers; each bucket's gradient is
//           reduce-scattered, each rank's optimizer steps only its shard of every bucket (so it keeps
//           1/dp of the optimizer state), and gather_parameters() all-gathers the updated shards.
// With a DP group of one there is no communication, just the flat buffers.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace loom {

// Which elements of a parameter an optimizer tensor holds: `length` elements of the flattened
// `parameter` from `parameter_offset`, stored from `offset` of the optimizer tensor. This is what makes
// optimizer state portable between layouts (train/optimizer_state).
struct ParameterSlice {
  torch::Tensor parameter;
  int64_t parameter_offset = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

class GradientSync {
 public:
  GradientSync(const std::vector<std::vector<torch::Tensor>>& groups, Communicator& dp_group, double bucket_mb,
               bool shard_optimizer_state);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  void zero_grad();              // zeros the buffers in place (the .grad views stay)
  void prepare_last_backward();  // the next backward completes this step's gradients: reduce during it
  void finish();                 // starts what has not started, waits for all, divides by the DP size

  // What the optimizer steps, per group: the parameters (zero 0) or this rank's bucket shards (zero 1),
  // each with its averaged gradient.
  std::vector<std::vector<torch::Tensor>> optimizer_groups() const;
  std::vector<torch::Tensor> optimizer_parameters() const;
  // Per optimizer_parameters() entry, the parameter elements it holds (zero 0: one whole parameter;
  // zero 1: the parts of the bucket's parameters that fall in this rank's shard; padding holds none).
  std::vector<std::vector<ParameterSlice>> optimizer_slices() const;
  bool sharded() const { return sharded_; }
  // zero 1: after the optimizer step, every rank gets every updated shard.
  void gather_parameters();

  size_t bucket_count() const { return buckets_.size(); }
  // Seconds finish() spent waiting for communication that backward had not already hidden.
  double last_wait_s() const { return last_wait_s_; }

  void on_gradient_ready(size_t bucket);  // called by the hooks

 private:
  struct Bucket {
    size_t group = 0;
    std::vector<torch::Tensor> parameters;
    torch::Tensor flat_grad;   // padded to a multiple of the DP size when sharded
    torch::Tensor flat_param;  // sharded only: the parameters' storage
    torch::Tensor shard;       // sharded only: this rank's slice of flat_param, gradient = its reduced slice
    size_t ready = 0;
    std::shared_ptr<Work> work;
  };
  void launch(Bucket& bucket);
  void flatten_parameters();  // zero 1: the parameters become views into the flat buffers

  Communicator& dp_group_;
  bool sharded_;
  size_t group_count_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
  double last_wait_s_ = 0;
};

}  // namespace loom
