#include "parallel/sharding.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace loom {
namespace {

bool holds(const std::vector<torch::Tensor>& tensors, const torch::Tensor& p) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&p](const torch::Tensor& t) { return t.unsafeGetTensorImpl() == p.unsafeGetTensorImpl(); });
}

// DDP: every rank keeps everything, and all-reduces the gradients once per step.
class NoSharding : public ShardingStrategy {
 public:
  ZeroStage stage() const override { return ZeroStage::kNone; }
  // bf16 autocast runs over fp32 parameters and caches a bf16 copy of each weight for the step. bf16
  // parameters (precision.param_dtype) are the bf16 weights plus an fp32 master copy. Gradients are fp32.
  ShardingMemory memory(const ShardingSizes& s) const override {
    ShardingMemory out;
    out.weights = s.bf16_params ? 2 * s.params + 4 * s.params : 4 * s.params + (s.bf16_autocast ? 2 * s.params : 0);
    out.gradients = 4 * s.params;
    out.optimizer = 8 * s.params;
    return out;
  }
  CommunicationEstimate communication(const ShardingSizes& s) const override {
    CommunicationEstimate out;
    if (s.shards * s.replicas > 1) out.all_reduced = 4 * s.params;
    return out;
  }
};

// ZeRO-1: the AdamW state (and bf16 parameters' fp32 master) sharded; each bucket's gradients are
// reduce-scattered once per step and the updated shards all-gathered.
class OptimizerSharding : public ShardingStrategy {
 public:
  ZeroStage stage() const override { return ZeroStage::kOptimizer; }
  bool shards_optimizer_state() const override { return true; }
  // The whole buckets stay and, beside them, the shard's reduced gradient (measured at dp 4: without it the
  // estimate was 11% low).
  ShardingMemory memory(const ShardingSizes& s) const override {
    const int64_t shard = s.shard_params();
    ShardingMemory out;
    out.weights = s.bf16_params ? 2 * s.params + 4 * shard : 4 * s.params + (s.bf16_autocast ? 2 * s.params : 0);
    out.gradients = 4 * s.params + 4 * shard;
    out.optimizer = 8 * shard;
    return out;
  }
  // Hybrid sharding: the shard's fp32 gradients over the replicas, once per step.
  CommunicationEstimate communication(const ShardingSizes& s) const override {
    CommunicationEstimate out;
    if (s.replicas > 1) out.all_reduced = 4 * s.shard_params();
    if (s.shards == 1) return out;
    out.reduce_scattered = 4 * s.params * (shards_gradients() ? s.micro_batches : 1);
    out.all_gathered = (s.bf16_params ? 2 : 4) * s.params;
    return out;
  }
};

// ZeRO-2: no rank keeps the whole gradient: every micro-batch's backward reduce-scatters each bucket as it
// fills and frees it.
class GradientSharding : public OptimizerSharding {
 public:
  ZeroStage stage() const override { return ZeroStage::kGradients; }
  bool shards_gradients() const override { return true; }
  // The shard's gradient, plus the buckets alive at once: the one backward is filling and those whose
  // reduce-scatter is under way. A bucket closes at bucket_mb of parameters (bf16 parameters: twice as many
  // fp32 gradients). A pipeline stage's copy of the tied embedding (first and last stage) is deferred: its
  // bucket, of its own, stays whole until the stages' gradients are summed (measured at dp 2 x pp 2, 1F1B,
  // bucket_mb 4: without it the first stage's estimate was 11% low, 8% with it and 6% after the copy got a
  // bucket of its own).
  ShardingMemory memory(const ShardingSizes& s) const override {
    ShardingMemory out = OptimizerSharding::memory(s);
    out.gradients = 4 * s.params;
    const auto alive = static_cast<int64_t>(kReductionsInFlight + 1) * s.bucket_params + s.deferred;
    if (s.shards > 1) out.gradients = 4 * (s.shard_params() + std::min(s.params, alive));
    return out;
  }
};

// ZeRO-3: the parameters live only as shards; the buckets are the model's units, each gathered around its
// forward and its backward (parallel/unit_gathers.h).
class ParameterSharding : public GradientSharding {
 public:
  ZeroStage stage() const override { return ZeroStage::kParameters; }
  bool shards_parameters() const override { return true; }

  std::vector<BucketContents> buckets(const std::vector<ShardedParameters>& parameters,
                                      const ShardingOptions& options) const override {
    const size_t groups = parameters.empty() ? 0 : parameters.front().groups.size();
    std::unordered_map<const void*, size_t> place_of;  // entry * groups + group
    for (size_t e = 0; e < parameters.size(); ++e)
      for (size_t g = 0; g < groups; ++g)
        for (const auto& p : parameters[e].groups[g])
          if (p.requires_grad()) place_of[p.unsafeGetTensorImpl()] = e * groups + g;
    std::vector<BucketContents> out;
    size_t placed = 0;
    for (size_t u = 0; u < options.units.size(); ++u) {
      std::vector<BucketContents> by_place(parameters.size() * groups);
      for (const auto& p : options.units[u]) {
        const auto found = place_of.find(p.unsafeGetTensorImpl());
        if (found == place_of.end()) continue;  // frozen
        auto& bucket = by_place[found->second];
        bucket.parameters.push_back(p);
        bucket.deferred = bucket.deferred || holds(options.deferred, p);
        ++placed;
      }
      for (size_t i = 0; i < by_place.size(); ++i) {
        by_place[i].entry = i / groups;
        by_place[i].group = i % groups;
        by_place[i].unit = u;
        out.push_back(std::move(by_place[i]));
      }
    }
    LOOM_CHECK(placed == place_of.size(), "gradient sync: the units hold ", placed, " of the ", place_of.size(),
               " trainable parameters (each must be in exactly one unit)");
    return out;
  }

  // The shards (fp32, the master of bf16 parameters) are the weights; what is gathered comes and goes: the
  // block computing and the one prefetched, and on a stage that runs forwards back to back (GPipe, 1F1B's
  // warm-up) the last block, kept from the previous forward for its backward; without resharding every
  // block. The ends beside them, but a whole GPT's, which take a block's place: gathered with the first block
  // (embeddings) and with the last (head), freed between (measured at dp 4 on 12 tied blocks: 63.1 MiB in
  // tensors, 62.9 estimated; kept all step, 64.1 and 64.0). A stage keeps the ends for the head's backward
  // while it runs other forwards: counted whole there.
  // The buckets are the units, two each (matrices, vectors): the kReductionsInFlight buckets in flight are one
  // unit's, reduce-scattered while the unit before it fills, so two blocks' gradients, or at the end of
  // backward the first block's and the ends'. An untied head's gradient comes first in backward, and its
  // bucket (the ends' matrices) waits for the embedding's, last: alive all through (measured at dp 4 on 12
  // tied blocks: 63.1 MiB in tensors, 62.9 estimated; counting three units, 3 MiB more).
  ShardingMemory memory(const ShardingSizes& s) const override {
    const UnitSizes& units = s.units;
    const int64_t computing = std::min<int64_t>(s.in_flight > 1 ? 3 : 2, units.count) * units.largest;
    const bool ends_come_and_go = units.ends_uses == 2;  // a whole GPT, resharding
    const int64_t gathered = !s.reshard_after_forward ? units.ends + units.blocks
                             : ends_come_and_go      ? std::max(computing, units.ends + units.largest)
                                                     : units.ends + computing;
    ShardingMemory out;
    out.weights = 4 * s.shard_params();
    out.gathered = (s.bf16_params ? 2 : 4) * gathered;
    out.gradients = 4 * s.params;
    const int64_t alive = std::max(2 * units.largest + units.head, units.largest + units.ends);
    if (s.shards > 1) out.gradients = 4 * (s.shard_params() + std::min(s.params, alive));
    out.optimizer = 8 * s.shard_params();
    return out;
  }
  CommunicationEstimate communication(const ShardingSizes& s) const override {
    CommunicationEstimate out = GradientSharding::communication(s);
    if (s.shards == 1) return out;
    const UnitSizes& units = s.units;
    const int64_t blocks =
        s.reshard_after_forward ? s.micro_batches * (2 * units.blocks - units.largest) : units.blocks;
    const int64_t ends = units.ends_uses > 0 ? s.micro_batches * units.ends_uses * units.ends : units.ends;
    out.all_gathered = (s.bf16_params ? 2 : 4) * (ends + blocks);
    return out;
  }
};

}  // namespace

std::vector<BucketContents> ShardingStrategy::buckets(const std::vector<ShardedParameters>& parameters,
                                                      const ShardingOptions& options) const {
  const auto bucket_bytes = static_cast<int64_t>(options.bucket_mb * 1024 * 1024);
  std::vector<BucketContents> out;
  for (size_t e = 0; e < parameters.size(); ++e) {
    const auto& groups = parameters[e].groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      // Backward produces gradients roughly from the last layer to the first: bucket in that order.
      out.push_back({e, g, 0, {}});
      int64_t bytes = 0;
      for (auto it = groups[g].rbegin(); it != groups[g].rend(); ++it) {
        const auto& p = *it;
        if (!p.requires_grad()) continue;
        // A deferred parameter's bucket is kept whole until finish() (ZeRO-2): it holds nothing else.
        if (holds(options.deferred, p)) {
          out.push_back({e, g, 0, {p}, true});
          continue;
        }
        auto& bucket = out.back().parameters;
        const bool dtype_change = !bucket.empty() && bucket.front().dtype() != p.dtype();
        if (!bucket.empty() && (bytes >= bucket_bytes || dtype_change || out.back().deferred)) {
          out.push_back({e, g, 0, {}});
          bytes = 0;
        }
        out.back().parameters.push_back(p);
        bytes += p.numel() * static_cast<int64_t>(p.element_size());
      }
    }
  }
  return out;
}

const ShardingStrategy& sharding_strategy(ZeroStage stage) {
  static const NoSharding none;
  static const OptimizerSharding optimizer;
  static const GradientSharding gradients;
  static const ParameterSharding parameters;
  switch (stage) {
    case ZeroStage::kNone: return none;
    case ZeroStage::kOptimizer: return optimizer;
    case ZeroStage::kGradients: return gradients;
    case ZeroStage::kParameters: return parameters;
  }
  throw Error("unknown ZeRO stage");
}

}  // namespace loom
