#include "train/step_phases.h"

#include <algorithm>

#ifdef LOOM_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace loom {

PhaseClock::PhaseClock(StepPhases& phases, torch::Device device, bool synchronize)
    : phases_(phases), synchronize_(synchronize && device.is_cuda()) {
  phases_ = StepPhases{};
#ifdef LOOM_CUDA
  if (synchronize_) c10::cuda::device_synchronize();  // the previous step's kernels are not this step's
#endif
  last_ = std::chrono::steady_clock::now();
}

void PhaseClock::lap(double StepPhases::*phase) { lap({}, phase); }

void PhaseClock::lap(std::initializer_list<std::pair<double StepPhases::*, double>> parts, double StepPhases::*rest) {
#ifdef LOOM_CUDA
  if (synchronize_) c10::cuda::device_synchronize();
#endif
  const auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - last_).count();
  for (const auto& [phase, seconds] : parts) {
    phases_.*phase += seconds;
    elapsed -= seconds;
  }
  phases_.*rest += std::max(0.0, elapsed);
  last_ = now;
}

}  // namespace loom
