#include "train/step_phases.h"

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

void PhaseClock::lap(double StepPhases::*phase) {
#ifdef LOOM_CUDA
  if (synchronize_) c10::cuda::device_synchronize();
#endif
  const auto now = std::chrono::steady_clock::now();
  phases_.*phase += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

}  // namespace loom
