#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace loom {

LrSchedule::LrSchedule(const Config& config)
    : schedule_(config.schedule),
      peak_lr_(config.optim.lr),
      d_model_(config.model.d_model),
      total_steps_(config.schedule_total_steps()) {}

double LrSchedule::at(int64_t step) const {
  const double s = static_cast<double>(step + 1);  // 1-based count of the step being taken
  const double warmup = static_cast<double>(schedule_.warmup_steps);
  const double total = static_cast<double>(total_steps_);
  const double min_lr = schedule_.min_lr;
  const ScheduleKind kind = schedule_.name;

  if (kind == ScheduleKind::kInverseSqrt)  // Noam: d_model^-0.5 * min(s^-0.5, s * warmup^-1.5), scaled by optim.lr
    return peak_lr_ * std::pow(static_cast<double>(d_model_), -0.5) * std::min(std::pow(s, -0.5), s * std::pow(warmup, -1.5));

  if (s <= warmup) return peak_lr_ * s / warmup;
  if (kind == ScheduleKind::kConstant) return peak_lr_;

  // Fraction of the decay done, from the end of warmup (or of the stable phase) to total_steps.
  auto decay_progress = [&](double decay_start) {
    if (total <= decay_start) return 1.0;
    return std::clamp((s - decay_start) / (total - decay_start), 0.0, 1.0);
  };
  if (kind == ScheduleKind::kWarmupCosine) {
    const double p = decay_progress(warmup);
    return min_lr + 0.5 * (peak_lr_ - min_lr) * (1.0 + std::cos(M_PI * p));
  }
  if (kind == ScheduleKind::kLinear) return peak_lr_ + (min_lr - peak_lr_) * decay_progress(warmup);
  // wsd: warmup, stable at peak, then linear decay over the last decay_fraction of total_steps
  const double decay_start = std::max(warmup, total * (1.0 - schedule_.decay_fraction));
  return peak_lr_ + (min_lr - peak_lr_) * decay_progress(decay_start);
}

}  // namespace loom
