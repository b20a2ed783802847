// Pipeline parallelism's arithmetic, free of any model: which blocks each stage holds, and the order in
// which a stage runs the forward and backward passes of a step's micro-batches under a schedule.
//   gpipe: every forward, then every backward. A stage keeps all m micro-batches' activations.
//   1f1b:  stage s of p runs min(p - s - 1, m) warm-up forwards, then alternates one forward and one
//          backward, then drains the remaining backwards: at most p - s micro-batches in flight.
// Both have the same ideal bubble, (p - 1) / (m + p - 1) of a stage's time idle. Running the actions
// (activations and gradients sent between neighbouring stages) is train/pipeline_runner.h's business.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config_enums.h"  // PipelineSchedule (parallel.pp_schedule)

namespace loom {

// Blocks per stage: `explicit_counts` (parallel.pp_layers) when given, else n_layers split evenly with
// the first n_layers % stages stages holding one more (the last stage also holds the head and the loss).
std::vector<int64_t> stage_layers(int64_t n_layers, int64_t stages, const std::vector<int64_t>& explicit_counts = {});

// The half-open range of blocks [first, end) stage `stage` holds.
struct BlockRange {
  int64_t first = 0;
  int64_t end = 0;
};
BlockRange stage_blocks(const std::vector<int64_t>& layers, int64_t stage);

struct PipelineAction {
  enum Kind { kForward, kBackward } kind;
  int64_t micro = 0;
  bool operator==(const PipelineAction& o) const { return kind == o.kind && micro == o.micro; }
};

// Stage `stage` of `stages`' actions for one step of `microbatches` micro-batches, in order. Every
// stage's forwards and backwards each come in micro-batch order, so the messages between two neighbours
// arrive in the order they are awaited.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                             int64_t microbatches);

// The ideal idle fraction of a stage, (p - 1) / (m + p - 1): equal forward and backward times per stage,
// free communication.
double ideal_bubble_fraction(int64_t stages, int64_t microbatches);

}  // namespace loom
