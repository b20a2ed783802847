// Where one training step's time goes, filled in by the Trainer as it runs the step (no second copy of
// the step exists for measuring): data, forward (loss included), backward, gradient sync (what backward
// did not hide), optimizer (clipping, AdamW, ZeRO-1 gather), and for a pipeline stage the time it waited
// on its neighbours (its own forwards and backwards count as forward and backward). On a GPU the phases
// only mean something when each boundary waits for the device, which costs overlap: `synchronize` is for
// `loom bench`.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <initializer_list>
#include <utility>

namespace loom {

struct StepPhases {
  double data_s = 0, forward_s = 0, backward_s = 0, sync_s = 0, optimizer_s = 0;
  double pipeline_wait_s = 0;  // pipeline stages: blocked on a neighbour (the bubble); 0 without stages
  // Not a phase of its own but part of those above: blocked on the data-parallel collectives (exposed
  // communication: GradientSync::step_wait_s; at ZeRO-3 the units' gathers inside forward and backward).
  double dp_wait_s = 0;
  // Likewise blocked on ring attention's messages (context parallelism), within forward and backward.
  double cp_wait_s = 0;
  // And blocked on the MoE layers' all-to-alls (expert parallelism: models/moe_dispatch.h), within forward and
  // backward.
  double ep_wait_s = 0;
  double total_s() const { return data_s + forward_s + backward_s + sync_s + optimizer_s + pipeline_wait_s; }
};

// Adds the time since the previous lap (or construction) to a phase of `phases`.
class PhaseClock {
 public:
  PhaseClock(StepPhases& phases, torch::Device device, bool synchronize);
  void lap(double StepPhases::*phase);
  // A lap made of known parts (seconds measured inside it, each added to its phase) and the rest of it,
  // added to `rest`: a pipeline's forwards, backwards and waits interleave within one call.
  void lap(std::initializer_list<std::pair<double StepPhases::*, double>> parts, double StepPhases::*rest);

 private:
  StepPhases& phases_;
  bool synchronize_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace loom
