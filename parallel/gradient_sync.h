// Data-parallel gradient averaging in flat buckets (parallel.bucket_mb), and ZeRO-1, 2 and 3
// (parallel.zero: 1, 2, 3), as the stage's sharding strategy (parallel/sharding.h) lays the buckets out. The
// parameters come as a list of entries (ShardedParameters), each averaged and sharded over its own shard
// group: a bucket holds one entry's parameters and runs its collectives on that entry's groups. Every
// parameter's .grad is a view into its bucket's flat buffer, so accumulation over micro-batches writes
// straight into what is reduced. A bucket's reduction starts as soon as all its
// gradients are accumulated (post-accumulate-grad hooks), overlapping the rest of backward. A bucket never
// mixes parameter groups (weight decay or not), so a bucket shard belongs to one optimizer group.
//   zero 0: all-reduce each bucket during the step's last backward (earlier micro-batches only
//           accumulate); the optimizer steps the parameters themselves.
//   zero 1: the parameters become views into padded flat buffers; each bucket's gradient is
//           reduce-scattered during the last backward, each rank's optimizer steps only its shard of every
//           bucket (so it keeps 1/dp of the optimizer state), and gather_parameters() all-gathers the
//           updated shards. The flat gradient buffers stay whole: 1/dp of them is what the optimizer reads.
//   zero 2: as zero 1, but no rank keeps the whole gradient: a bucket's flat buffer is allocated when its
//           first gradient of a backward arrives (a pre-accumulation hook), reduce-scattered in every
//           micro-batch's backward as soon as it is full, added into this rank's shard gradient and freed.
//           At most kReductionsInFlight reductions are outstanding (launching one more first finishes the
//           oldest), so what is held is the shards plus a few buckets. Accumulation therefore costs one
//           reduce-scatter per micro-batch (measured against local accumulation then one reduce-scatter:
//           docs/ARCHITECTURE.md, section 5). `deferred` parameters (a pipeline stage's copy of the tied
//           embedding, whose gradient is summed over the stages after the last backward) have a bucket of
//           their own (nothing else is kept with them), kept whole over the micro-batches and reduced in
//           finish(), as zero 1 does (zero 3 too: the bucket of the ends unit that holds it).
//   zero 3: as zero 2, but the parameters live only as shards: the buckets are the model's units
//           (parallel/parameter_units.h: each block, the ends), one per unit and optimizer group, not
//           bucket_mb; each shard is a tensor of its own, and the full flat buffers, whose views the
//           parameters are, hold storage only while parallel/unit_gathers.h has the unit gathered. A unit
//           is freed once its gradients are reduced in backward (block units, when resharding), after the
//           head's backward (the GPT's ends) or at finish() (the encoder-decoder's ends; every unit with
//           parallel.reshard_after_forward false);
//           after the optimizer step nothing is gathered: the next forward gathers the updated shards.
// With a shard group of one there is no communication, just the flat buffers (zero 2: copies into the shard).
// Hybrid sharding (parallel.shard_size, zero 1 to 3): the group given is the shard group, a part of the
// ranks holding the same parameters, and `replica_group` the ranks holding the same shard as this one: the
// reduce-scatters and all-gathers stay in the shard group, and each shard's gradient is all-reduced over the
// replicas once its step's last reduce-scatter is done: zero 2, 3: during the last backward, as that
// reduce-scatter is waited for (a bucket reduced only in earlier micro-batches, or under pipeline stages,
// in finish()); zero 1: in finish(), each as its reduce-scatter completes. finish() waits for them all;
// gradients are averaged over both groups.
// Sparse entries (ShardedParameters::sparse: MoE experts under ep, where a rank whose experts got no row in a
// micro-batch has no gradient for them while its peers do): a parameter without a gradient is reduced as zeros
// (its place in the flat buffer), and the collectives of a shard group holding sparse buckets start in
// backward order, a bucket waiting for those before it, so that every rank issues them in the same order
// whichever of its buckets completed. A bucket a rank got no (or not every) gradient for is reduced anyway:
// zero 0, 1: in finish() (in order); zero 2, 3: at the end of each backward (end_backward(), which the trainer
// calls after every backward) and, zero 3, when the next unit's backward starts, before that unit's gathers on
// the same group (a unit's buckets reduced, so every reduction count and order is every rank's).
// param_dtype bf16 (precision.param_dtype, Megatron's --bf16): the parameters become bf16 views into flat
// buffers, their .grad stays the fp32 bucket views (autograd adds each bf16 micro-batch gradient into them
// in fp32: accumulation and the DP reduction are fp32), and what the optimizer steps is an fp32 master
// copy (zero 0: the whole of each parameter; zero 1: only this rank's shard of each bucket) whose gradient is
// the fp32 bucket (shard). gather_parameters() then rounds the updated master into the bf16 weights.
#pragma once
#include <torch/torch.h>

#include <deque>
#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/sharding.h"
#include "parallel/unit_gathers.h"

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
  // parameters: fp32, each entry with its optimizer groups and its shard and replica groups (replicas need
  // ZeRO-1, 2 or 3). options: the ZeRO stage, bucket size, parameter dtype, deferred parameters, units.
  GradientSync(std::vector<ShardedParameters> parameters, const ShardingOptions& options);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  void zero_grad();              // zeros the buffers in place (the .grad views stay; zero 2: the shards')
  void prepare_last_backward();  // the next backward completes this step's gradients: reduce during it
  // After every backward: zero 2, 3: the sparse buckets not reduced in it are reduced now (zeros where
  // nothing arrived), in order; otherwise nothing.
  void end_backward();
  void finish();                 // starts what has not started, waits for all, divides by the DP size

  // What the optimizer steps, per optimizer group (every entry's): the parameters (zero 0) or this rank's
  // bucket shards (zero 1), each with its averaged gradient.
  std::vector<std::vector<torch::Tensor>> optimizer_groups() const;
  std::vector<torch::Tensor> optimizer_parameters() const;
  // Per optimizer_parameters() entry, the parameter elements it holds (zero 0: one whole parameter;
  // zero 1: the parts of the bucket's parameters that fall in this rank's shard; padding holds none).
  std::vector<std::vector<ParameterSlice>> optimizer_slices() const;
  bool sharded() const { return sharded_; }  // zero 1 or 2: optimizer state and shards over the DP group
  bool shards_gradients() const { return shard_gradients_; }  // zero 2, 3
  bool shards_parameters() const { return gathers_ != nullptr; }  // zero 3
  // zero 3: what the model calls around its units (null otherwise); free_parameters() frees every gathered
  // unit (after an evaluation's forwards: finish() frees them after a step's).
  UnitGathers* parameter_units() const { return gathers_.get(); }
  void free_parameters();
  // zero 3: what runs after the forward or backward about to start (UnitGathers prefetches across it).
  void set_next_pass(NextPass next) {
    if (gathers_) gathers_->set_next_pass(next);
  }
  // After the optimizer step, or after a checkpoint was read into optimizer_parameters(): zero 1, 2: every
  // rank gets every updated shard (collective over the shard group); bf16 parameters: the weights become
  // the master rounded to bf16. zero 3: nothing (each unit's next gather reads its shards).
  void gather_parameters();

  // bf16 parameters: whether there is an fp32 master, which optimizer_parameters() are.
  bool has_master() const { return master_; }

  size_t bucket_count() const { return buckets_.size(); }
  // Seconds finish() spent waiting for communication that backward had not already hidden.
  double last_wait_s() const { return last_wait_s_; }
  // Seconds this step (since zero_grad()) was blocked on the DP group's collectives anywhere: the exposed
  // communication. finish()'s wait, reduce-scatters waited for during backward (zero 2, 3: a third in
  // flight), the replicas' all-reduce (hybrid sharding), the updated parameters' gather (zero 1, 2) and the
  // units' gathers (zero 3).
  double step_wait_s() const;

  void on_gradient_arriving(size_t bucket);  // called by the pre-accumulation hooks (zero 2)
  void on_gradient_ready(size_t bucket);     // called by the post-accumulation hooks

 private:
  struct Bucket {
    size_t group = 0;
    size_t unit = 0;  // zero 3
    Communicator* shard_group = nullptr;    // its entry's
    Communicator* replica_group = nullptr;  // hybrid sharding: its entry's replicas; null: none
    int64_t averaged_over = 0;              // its entry's (0: shard x replica group sizes)
    bool hooked = false;                    // post-accumulation hooks set (something to reduce)
    std::vector<torch::Tensor> parameters;
    std::vector<unsigned> pre_hooks;  // zero 2: the parameters' pre-accumulation hook handles
    int64_t numel = 0;         // of the flat buffers, padded to a multiple of the DP size when sharded
    torch::TensorOptions grad_options;  // fp32, on the parameters' device
    bool deferred = false;     // zero 2: holds a deferred parameter, reduced in finish()
    // zero 0, 1: always there; zero 2: only between its first gradient of a backward and its reduction
    torch::Tensor flat_grad;
    torch::Tensor flat_param;  // sharded or bf16 parameters: the parameters' storage
    // sharded only: this rank's slice of flat_param, gradient = its reduced slice; with bf16 parameters an
    // fp32 copy of that slice (the master shard).
    torch::Tensor shard;
    torch::Tensor flat_master;            // bf16 parameters, zero 0: fp32 master of the whole bucket
    std::vector<torch::Tensor> masters;   // bf16 parameters, zero 0: per parameter, its view of flat_master
    size_t ready = 0;
    int ordered = -1;       // its shard group's place in ordered_ (a group holding sparse buckets); -1: none
    bool complete = false;  // ordered: every gradient arrived in this pass, waiting for its turn
    std::shared_ptr<Work> work;  // zero 0, 1
    std::shared_ptr<Work> replica_work;  // hybrid sharding: the shard gradient's all-reduce over the replicas
  };
  // zero 2: a bucket's reduce-scatter under way; its input (the bucket's gradients) is freed once done.
  struct Reduction {
    size_t bucket = 0;
    bool completes_step = false;  // launched in the step's last backward or finish(): the bucket's last this step
    torch::Tensor input, output;
    std::shared_ptr<Work> work;
  };
  // A shard group holding sparse buckets: its buckets in backward order (zero 3: units last to first), and
  // the next to start in this pass.
  struct OrderedGroup {
    Communicator* group = nullptr;
    std::vector<size_t> buckets;
    size_t next = 0;
  };
  // Makes an OrderedGroup of each shard group holding a sparse bucket (parallel/gradient_sync_order.cpp).
  void order_sparse_buckets(const std::vector<bool>& sparse_buckets, bool by_unit);
  void bucket_complete(size_t bucket);  // its gradients all arrived: start it (ordered: in its turn)
  void start(size_t bucket);            // launch (zero 0, 1) or launch_reduction (zero 2, 3)
  // Starts the ordered group's buckets up to (excluding) the first of unit `before_unit` or a lower one
  // (zero 3), or all of them (-1), whether or not their gradients arrived; all: the next pass starts afresh.
  void flush(OrderedGroup& group, int64_t before_unit = -1);
  void launch(Bucket& bucket);
  void launch_reduction(size_t bucket);  // zero 2
  void finish_oldest_reduction();        // zero 2: waits for it and adds its output into the shard's gradient
  void point_gradients_at(Bucket& bucket, const torch::Tensor& flat);  // each .grad a view of `flat`
  void flatten_parameters();  // zero 1, bf16 parameters: the parameters become views into the flat buffers
  void point_parameters_at(const Bucket& bucket, const torch::Tensor& flat);  // each parameter a view of `flat`
  // Hybrid sharding: a bucket's shard gradient, complete for the step, summed over the replicas (started as
  // soon as its last reduce-scatter is done); finish_replica_reductions starts the rest, waits for all and
  // returns the seconds waited.
  void start_replica_reduction(Bucket& bucket);
  double finish_replica_reductions();
  // The ranks whose gradients a bucket averages: its shard group's times its replicas'.
  static double ranks_averaged(const Bucket& bucket);

  const ShardingStrategy& strategy_;
  bool sharded_;
  bool shard_gradients_;  // zero 2, 3
  std::unique_ptr<UnitGathers> gathers_;  // zero 3
  std::vector<size_t> unit_buckets_, unit_reduced_;  // zero 3, per unit: its buckets, those reduced this backward
  bool master_;  // bf16 parameters over an fp32 master
  torch::ScalarType param_dtype_;
  size_t group_count_;  // optimizer groups
  std::vector<Bucket> buckets_;
  std::deque<Reduction> reductions_;  // zero 2, oldest first
  std::vector<OrderedGroup> ordered_;
  bool armed_ = false;
  double last_wait_s_ = 0;
  double step_wait_s_ = 0;         // this step's waits, but the units' gathers
  double gathers_waited_at_zero_grad_ = 0;  // zero 3: UnitGathers::waited_s() when the step began
};

}  // namespace loom
