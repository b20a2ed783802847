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
// param_dtype bf16 (precision.param_dtype, Megatron's --bf16): the parameters become bf16 views into flat
// buffers, their .grad stays the fp32 bucket views (autograd adds each bf16 micro-batch gradient into them
// in fp32: accumulation and the DP reduction are fp32), and what the optimizer steps is an fp32 master
// copy (zero 0: the whole of each parameter; zero 1: only this rank's shard of each bucket) whose gradient is
// the fp32 bucket (shard). gather_parameters() then rounds the updated master into the bf16 weights.
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
  // groups: fp32 parameters. param_dtype kBFloat16 turns them into bf16 working weights over an fp32 master.
  GradientSync(const std::vector<std::vector<torch::Tensor>>& groups, Communicator& dp_group, double bucket_mb,
               bool shard_optimizer_state, torch::ScalarType param_dtype = torch::kFloat);
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
  // After the optimizer step: zero 1: every rank gets every updated shard; bf16 parameters: the weights
  // become the updated master rounded to bf16.
  void gather_parameters();

  // bf16 parameters: whether there is an fp32 master (otherwise show/hide_master do nothing).
  bool has_master() const { return master_; }
  // The parameters point at fp32 master values (zero 1: all-gathered over the DP group, so collective)
  // until hide_master(): what a checkpoint writes, and where one is read into.
  void show_master();
  // Back to the bf16 weights. loaded: the parameters were written while shown (a checkpoint was read
  // into them on every rank): the master takes those values and the weights their bf16 rounding.
  void hide_master(bool loaded);

  size_t bucket_count() const { return buckets_.size(); }
  // Seconds finish() spent waiting for communication that backward had not already hidden.
  double last_wait_s() const { return last_wait_s_; }

  void on_gradient_ready(size_t bucket);  // called by the hooks

 private:
  struct Bucket {
    size_t group = 0;
    std::vector<torch::Tensor> parameters;
    torch::Tensor flat_grad;   // padded to a multiple of the DP size when sharded
    torch::Tensor flat_param;  // sharded or bf16 parameters: the parameters' storage
    // sharded only: this rank's slice of flat_param, gradient = its reduced slice; with bf16 parameters an
    // fp32 copy of that slice (the master shard).
    torch::Tensor shard;
    torch::Tensor flat_master;            // bf16 parameters, zero 0: fp32 master of the whole bucket
    std::vector<torch::Tensor> masters;   // bf16 parameters, zero 0: per parameter, its view of flat_master
    torch::Tensor shown;                  // between show_master and hide_master: the fp32 values shown
    size_t ready = 0;
    std::shared_ptr<Work> work;
  };
  void launch(Bucket& bucket);
  void flatten_parameters();  // zero 1, bf16 parameters: the parameters become views into the flat buffers
  void point_parameters_at(const Bucket& bucket, const torch::Tensor& flat);  // each parameter a view of `flat`

  Communicator& dp_group_;
  bool sharded_;
  bool master_;  // bf16 parameters over an fp32 master
  torch::ScalarType param_dtype_;
  size_t group_count_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
  double last_wait_s_ = 0;
};

}  // namespace loom
