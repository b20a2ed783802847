#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace loom {

std::vector<int64_t> stage_layers(int64_t n_layers, int64_t stages, const std::vector<int64_t>& explicit_counts) {
  LOOM_CHECK(stages >= 1 && stages <= n_layers, "cannot split ", n_layers, " blocks into ", stages, " stages");
  if (!explicit_counts.empty()) {
    int64_t sum = 0;
    for (int64_t n : explicit_counts) {
      LOOM_CHECK(n >= 1, "parallel.pp_layers: every stage needs at least one block");
      sum += n;
    }
    LOOM_CHECK(static_cast<int64_t>(explicit_counts.size()) == stages && sum == n_layers,
               "parallel.pp_layers must list parallel.pp block counts adding up to model.n_layers");
    return explicit_counts;
  }
  std::vector<int64_t> layers(static_cast<size_t>(stages), n_layers / stages);
  for (int64_t s = 0; s < n_layers % stages; ++s) layers[static_cast<size_t>(s)] += 1;
  return layers;
}

BlockRange stage_blocks(const std::vector<int64_t>& layers, int64_t stage) {
  LOOM_CHECK(stage >= 0 && stage < static_cast<int64_t>(layers.size()), "no pipeline stage ", stage);
  BlockRange range;
  for (int64_t s = 0; s < stage; ++s) range.first += layers[static_cast<size_t>(s)];
  range.end = range.first + layers[static_cast<size_t>(stage)];
  return range;
}

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                             int64_t microbatches) {
  LOOM_CHECK(stage >= 0 && stage < stages && microbatches >= 1, "pipeline stage ", stage, " of ", stages, " with ",
             microbatches, " micro-batches");
  const int64_t m = microbatches;
  std::vector<PipelineAction> actions;
  const int64_t warmup = schedule == PipelineSchedule::kGPipe ? m : std::min(stages - stage - 1, m);
  for (int64_t i = 0; i < warmup; ++i) actions.push_back({PipelineAction::kForward, i});
  int64_t next_backward = 0;
  for (int64_t i = warmup; i < m; ++i) {  // steady state (1F1B only): one forward, one backward
    actions.push_back({PipelineAction::kForward, i});
    actions.push_back({PipelineAction::kBackward, next_backward++});
  }
  while (next_backward < m) actions.push_back({PipelineAction::kBackward, next_backward++});
  return actions;
}

double ideal_bubble_fraction(int64_t stages, int64_t microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace loom
