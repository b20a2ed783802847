// ZeRO's stages as sharding strategies (parallel.zero): one object per stage says what the data-parallel
// ranks shard between them, which parameters share a gradient bucket, and what the stage costs in memory and
// communication. parallel/gradient_sync.h runs a strategy's buckets; models/estimates.cpp asks the same
// strategy for its bytes, so the planner never re-derives what the sync does. Each stage shards what the one
// before it does and more: none (DDP), the optimizer state (ZeRO-1), the gradients (ZeRO-2), the
// parameters (ZeRO-3, whose buckets are the model's units).
// The parameters are a list of ShardedParameters: a model's dense parameters are one entry, averaged and
// sharded over dp x cp; a set that shards over other ranks (experts over their expert-data-parallel group) is
// another entry, not another mode.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/config_enums.h"
#include "parallel/communicator.h"

namespace loom {

// Parameters that shard alike: their optimizer groups (weight decay or not: the same number in every entry),
// the ranks their gradients are averaged and ZeRO shards over, and hybrid sharding's replicas of this rank's
// shards (null, or a group of one: none).
// averaged_over: the ranks the gradients are averaged over when that is not the shard group's times the
// replicas' (0): experts under expert parallelism are summed over the ranks holding them but averaged over all
// of dp x cp, since each holds gradients of every ep rank's tokens.
// sparse: a rank may get no gradient for some of these parameters in a backward where the other ranks of the
// group do (MoE experts under expert parallelism: a rank none of whose experts got a row); GradientSync then
// reduces zeros for them, keeping every rank's collectives in the same order (parallel/gradient_sync.h).
struct ShardedParameters {
  std::vector<std::vector<torch::Tensor>> groups;
  Communicator* shard_group = nullptr;
  Communicator* replica_group = nullptr;
  int64_t averaged_over = 0;
  bool sparse = false;
};

// How a run's gradient sync shards and buckets (parallel.*, precision.param_dtype).
struct ShardingOptions {
  ZeroStage zero = ZeroStage::kNone;
  double bucket_mb = 25;                          // ZeRO 0 to 2: parameters' bytes per bucket
  torch::ScalarType param_dtype = torch::kFloat;  // kBFloat16: bf16 working weights over an fp32 master
  // Parameters whose gradient is completed after the last backward (a pipeline stage's copy of the tied
  // embedding): a bucket of their own, reduced in finish().
  std::vector<torch::Tensor> deferred;
  // ZeRO-3: the model's parameter units (parallel/parameter_units.h), the ends first; every trainable
  // parameter in one.
  std::vector<std::vector<torch::Tensor>> units;
  bool reshard_after_forward = true;  // ZeRO-3: parallel.reshard_after_forward
};

// Parameters that share a gradient bucket: of one entry and optimizer group (and ZeRO-3 unit).
struct BucketContents {
  size_t entry = 0, group = 0, unit = 0;
  std::vector<torch::Tensor> parameters;
  bool deferred = false;  // holds a deferred parameter
};

// ZeRO-3's units per TP rank of one pipeline stage: what its estimates are computed from.
struct UnitSizes {
  int64_t count = 0;    // the stage's blocks
  int64_t largest = 0;  // the largest block's parameters (a stage's last block is its largest)
  int64_t blocks = 0;   // all its blocks' parameters
  int64_t ends = 0;
  int64_t head = 0;  // an untied head's parameters (in the ends; only on the last stage)
  // Resharding, a model whose ends are not kept (ModelShape::ends_kept) frees them between its embeddings and
  // its head (parallel/parameter_units.h), gathering them for each (once per micro-batch for each the stage runs).
  int64_t ends_uses = 0;  // gathers of the ends per micro-batch: 0 when they are kept for the step
};

// One rank's view of one pipeline stage: what a strategy's estimates take.
struct ShardingSizes {
  int64_t params = 0;    // the stage's parameters on this rank (1/tp of them)
  int64_t shards = 1;    // the ranks ZeRO shards over
  int64_t replicas = 1;  // hybrid sharding: the ranks holding the same shard
  int64_t micro_batches = 1;  // per step (a pipeline stage: the micro-batches it runs)
  int64_t in_flight = 1;      // micro-batches whose forward is done and backward is not, at most
  bool bf16_params = false;   // precision.param_dtype bf16
  bool bf16_autocast = false;  // precision.dtype bf16: autocast caches a bf16 copy of each fp32 weight
  int64_t bucket_params = 0;   // a bucket's parameters (parallel.bucket_mb)
  int64_t deferred = 0;        // parameters in a deferred bucket (a stage's copy of the tied embedding)
  UnitSizes units;             // ZeRO-3
  bool reshard_after_forward = true;
  // The parameters ZeRO's shards split when that is not `params` (0): under expert parallelism a rank holds E / ep
  // experts but shards them over dp x cp / ep ranks, so its shard is that of all the experts over dp x cp.
  int64_t sharded_params = 0;
  int64_t shard_params() const { return ((sharded_params > 0 ? sharded_params : params) + shards - 1) / shards; }
};

// Bytes a rank holds for its parameters while training (models/estimates.h MemoryEstimate's parts).
struct ShardingMemory {
  int64_t weights = 0;    // fp32 parameters (+ autocast's bf16 copies), or bf16 ones + their fp32 master; ZeRO-3: the shards
  int64_t gathered = 0;   // ZeRO-3: the units gathered at once
  int64_t gradients = 0;  // fp32: whole, or the shard + the buckets alive at once
  int64_t optimizer = 0;  // AdamW's two fp32 moments
};

// Bytes of the buffers one rank hands to the data-parallel collectives per optimizer step, padding to a
// multiple of the shards aside (what the wire carries: a ring moves 2(n - 1)/n of an all-reduce's buffer and
// (n - 1)/n of the others'). Nothing with one rank. Under hybrid sharding the reduce-scatters and all-gathers
// run within the shard group and the all-reduce over the replicas.
struct CommunicationEstimate {
  int64_t all_reduced = 0;       // zero 0: the fp32 gradients, once per step; hybrid sharding: the shard's
  int64_t reduce_scattered = 0;  // fp32 gradients: zero 1 once per step, zero 2 and 3 once per micro-batch
  // zero 1, 2: the updated parameters (bf16 ones with precision.param_dtype bf16); zero 3: the stage's ends
  // unit once and per micro-batch every block for its forward and again for its backward (but the last,
  // kept); with parallel.reshard_after_forward false every block once per step
  int64_t all_gathered = 0;
};

// Reduce-scatters a ZeRO-2 or 3 rank keeps outstanding during backward: enough to overlap communication with
// the next bucket's gradients, few enough that only a few buckets' buffers are alive beside the shards. Also
// the all-gathers of updated shards a ZeRO-1 or 2 rank keeps under way after the optimizer step.
inline constexpr size_t kReductionsInFlight = 2;

class ShardingStrategy {
 public:
  virtual ~ShardingStrategy() = default;
  virtual ZeroStage stage() const = 0;
  // What each rank keeps 1/shards of (each stage what the one before does, and more).
  virtual bool shards_optimizer_state() const { return false; }
  virtual bool shards_gradients() const { return false; }
  virtual bool shards_parameters() const { return false; }
  // Which parameters share a bucket: parallel.bucket_mb of one entry's optimizer group, in backward's order
  // (a deferred parameter alone); ZeRO-3: one unit's of one entry and group.
  virtual std::vector<BucketContents> buckets(const std::vector<ShardedParameters>& parameters,
                                              const ShardingOptions& options) const;
  virtual ShardingMemory memory(const ShardingSizes& sizes) const = 0;
  virtual CommunicationEstimate communication(const ShardingSizes& sizes) const = 0;
};

const ShardingStrategy& sharding_strategy(ZeroStage stage);

}  // namespace loom
