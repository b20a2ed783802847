// Learning-rate schedules as pure functions of the optimizer step (0-based: the step about to be taken).
// Nothing here has state, so resume only needs the step counter.
#pragma once
#include <cstdint>

#include "core/config.h"

namespace loom {

class LrSchedule {
 public:
  explicit LrSchedule(const Config& config);
  double at(int64_t step) const;

 private:
  ScheduleConfig schedule_;
  double peak_lr_;
  int64_t d_model_;
  int64_t total_steps_;
};

}  // namespace loom
