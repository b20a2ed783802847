// A run resolved once, before anything is built: the config with what the data decides filled in
// (model.vocab_size from the tokenizer or the data), the layout resolved against the job's world, and what
// follows for every pipeline stage: its blocks, parameters, memory and communication per rank
// (models/estimates.h). The Trainer, `loom info`, `loom bench` and the memory check read this one plan;
// nothing changes the config after it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/estimates.h"
#include "parallel/mesh.h"

namespace loom {

struct StagePlan {
  StageBlockCounts blocks;
  int64_t parameters = 0;               // the stage's, over all its TP ranks
  MemoryEstimate memory;                // per rank of the stage
  CommunicationEstimate communication;  // per rank of the stage and step
};

class RunPlan {
 public:
  // world: the job's ranks, which fill parallel.dp = -1 (and are checked against the layout); 0 plans
  // without a job (`loom info`: a dp of -1 reads as 1).
  RunPlan(Config config, int64_t world);

  // The config as loaded, model.vocab_size resolved; parallel.dp as asked (-1 stays: layout() has the size).
  const Config& config() const { return config_; }
  const MeshShape& layout() const { return layout_; }
  int64_t dp() const { return dp_; }  // the data-parallel size (1 for a dp of -1 planned without a job)
  int64_t micro_batch_size() const { return config_.micro_batch_size(dp_); }
  int64_t accumulation_steps() const { return config_.accumulation_steps(dp_); }
  int64_t parameters() const;       // the whole model's
  double flops_per_token() const;   // training, at data.seq_len
  const std::vector<StagePlan>& stages() const { return stages_; }
  const StagePlan& stage(int64_t s) const { return stages_.at(static_cast<size_t>(s)); }
  int64_t busiest_stage() const;  // the most memory per rank

  // Why a rank of pipeline stage `stage` cannot fit in `available` bytes: first the model (weights,
  // gradients, AdamW state), then a micro-batch's activations on top, each message naming the keys that
  // shrink it; nothing when it fits.
  std::optional<std::string> memory_shortfall(int64_t stage, int64_t available) const;

 private:
  Config config_;
  MeshShape layout_;
  int64_t dp_ = 1;
  std::vector<StagePlan> stages_;
};

}  // namespace loom
