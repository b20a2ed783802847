#include "train/run_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "data/corpus/data_files.h"

namespace loom {
namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

Config with_vocabulary(Config config) {
  config.model.vocab_size = planned_vocab_size(config);
  return config;
}

}  // namespace

RunPlan::RunPlan(Config config, int64_t world)
    : config_(with_vocabulary(std::move(config))),
      layout_(world > 0 ? MeshShape(config_.parallel).resolved(config_, world) : MeshShape(config_.parallel)) {
  dp_ = std::max<int64_t>(1, layout_.group_size(kDpAxes));
  if (world > 0) validate_batch_split(config_, dp_);
  // The estimates read the layout from the config: the resolved one.
  Config resolved = config_;
  resolved.parallel.dp = dp_;
  for (int64_t s = 0; s < config_.parallel.pp; ++s) {
    StagePlan stage;
    stage.blocks = stage_block_counts(resolved, s);
    stage.parameters = count_stage_parameters(resolved, s);
    stage.memory = estimate_memory(resolved, s);
    stage.communication = estimate_communication(resolved, s);
    stages_.push_back(stage);
  }
}

int64_t RunPlan::parameters() const { return count_parameters(config_.model); }

double RunPlan::flops_per_token() const { return training_flops_per_token(config_.model, config_.data.seq_len); }

int64_t RunPlan::busiest_stage() const {
  const auto busiest = std::max_element(stages_.begin(), stages_.end(), [](const StagePlan& a, const StagePlan& b) {
    return a.memory.total() < b.memory.total();
  });
  return busiest - stages_.begin();
}

std::optional<std::string> RunPlan::memory_shortfall(int64_t stage_index, int64_t available) const {
  const MemoryEstimate& memory = stage(stage_index).memory;
  const int64_t model = memory.weights + memory.gradients + memory.optimizer + memory.gathered;
  // As `loom info` names the layout; a pipeline names the stage too.
  std::string layout = layout_.describe(" x ", " ");
  if (config_.parallel.zero != ZeroStage::kNone) layout += std::string(" with ZeRO-") + enum_name(config_.parallel.zero);
  if (config_.parallel.pp > 1) layout += " on pipeline stage " + std::to_string(stage_index);
  if (model > available)
    return fmt::format(
        "the model does not fit: each rank needs {} for weights, gradients and AdamW state (plus about {} of "
        "activations; `loom info` shows the estimate) at {}, but {} is available to it. Train a smaller model "
        "(model.d_model, model.n_layers), or spread it over more ranks (parallel.tp, parallel.pp, parallel.zero: 1, "
        "2 or 3 with more dp ranks)",
        gib(model), gib(memory.activations), layout, gib(available));
  if (memory.total() > available)
    return fmt::format(
        "the batch does not fit: besides the model's {}, each rank needs about {} for the activations of "
        "train.micro_batch_size={} sequences of data.seq_len={} tokens (`loom info` shows the estimate) at {}, but {} "
        "is available to it. Lower train.micro_batch_size (gradient accumulation keeps train.batch_size), set "
        "train.activation_checkpointing, or split each sequence over more ranks (parallel.cp)",
        gib(model), gib(memory.activations + memory.pipeline_sends), micro_batch_size(), config_.data.seq_len, layout,
        gib(available));
  return std::nullopt;
}

}  // namespace loom
